/* SPDX-License-Identifier: MIT */
/*
 * statedir: the state beaconmux keeps across restarts (`stateDir`), one file per network.
 *
 * Modules own what they remember; this module owns the file. Each module registers a named
 * section with two functions: export appends its state as one JSON value, import takes
 * that text back. The file is one JSON document:
 *
 *   {"format":"beaconmux-state","version":1,"network":"<id>","genesisValidatorsRoot":
 *    "0x.." (when configured),"savedMs":N,"sections":{"replay":<value>,"sszRefusals":<value>,
 *    "journal":<value>}}
 *
 * It is written atomically (base/statefile.h) at most once per `interval_ms` while
 * something changed (a save whose bytes equal the previous save's is skipped) and once at
 * shutdown, and read once at start. A file that cannot be read, is not JSON, has another
 * format or version, or belongs to another network is reported in the log and ignored:
 * beaconmux starts empty as it would without a stateDir, and the file is renamed to
 * "<file>.bad" so that the next save does not destroy what an operator may want to read. A section
 * a module refuses is reported and skipped; the others are still restored. A failed write (full
 * disk) is logged and leaves the previous file as it was.
 *
 * Sections are text so that another store (Redis) can keep the same values per key, and
 * later modules add a section without touching this file.
 */
#ifndef BM_STATEDIR_H
#define BM_STATEDIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"

/** Appends the module's state as one JSON value to `out`, at wall time `now_ms`.
 *  Returns 0 or a BM_E* code (then the section is left out of this save). */
typedef int (*bm_state_export_fn)(void *ud, uint64_t now_ms, bm_str_t *out);

/** Restores from the text `json` (`len` bytes) a previous export wrote; `now_ms` is the
 *  wall time now. Returns entries restored (>= 0) or a BM_E* code (the section is skipped,
 *  the module's state must be as before the call or empty). */
typedef int (*bm_state_import_fn)(void *ud, const char *json, size_t len, uint64_t now_ms);

#define BM_STATEDIR_VERSION 1
#define BM_STATEDIR_MAX_BYTES (256u << 20) /* a larger state file is refused */

typedef struct bm_statedir bm_statedir_t;

typedef struct bm_statedir_opts {
    const char *dir;      /* borrowed; must exist and be writable */
    const char *file;     /* borrowed; file name inside dir, e.g. "state.json" */
    const char *network;  /* borrowed; network id written into and checked in the file */
    const char *genesis;  /* borrowed; genesisValidatorsRoot, or NULL when not configured:
                             a file and a configuration that both name one must agree */
    uint32_t interval_ms; /* at most one periodic save per interval (0: 30 s) */
} bm_statedir_opts_t;

/** A state directory on `clock` (borrowed; its timer and wall time). Copies the strings of
 *  `o`. NULL on allocation failure. */
bm_statedir_t *bm_statedir_new(bm_clock_t *clock, const bm_statedir_opts_t *o);

/** Registers a section (`name` static, unique). Returns 0, BM_EINVAL or BM_ENOMEM. */
int bm_statedir_add(bm_statedir_t *sd, const char *name, bm_state_export_fn exp,
                    bm_state_import_fn imp, void *ud);

/**
 * Reads the file and gives each registered section to its import function. Returns the
 * number of sections restored, BM_ENOTFOUND when there is no file, or BM_EINVAL / BM_EIO /
 * BM_ETOOBIG for a file that was reported and ignored. Never fatal.
 */
int bm_statedir_load(bm_statedir_t *sd);

/** Exports every section and writes the file when its bytes changed. Returns 0 (written
 *  or unchanged) or a BM_E* code (logged; the previous file is intact). */
int bm_statedir_save(bm_statedir_t *sd);

/** Starts the periodic save. */
void bm_statedir_start(bm_statedir_t *sd);

/** Saves once more (shutdown) and closes the timer; run the loop, then free. Idempotent. */
void bm_statedir_stop(bm_statedir_t *sd);

/** Another owner writes the file from now on (a reload's network that replaces this one):
 *  stops like bm_statedir_stop but without the last save, which would put back older
 *  state. Idempotent. */
void bm_statedir_disown(bm_statedir_t *sd);

/** Frees (after bm_statedir_stop and a loop run). NULL is ignored. */
void bm_statedir_free(bm_statedir_t *sd);

/** Saves written, and saves that failed, so far. */
uint64_t bm_statedir_writes(const bm_statedir_t *sd);
uint64_t bm_statedir_failures(const bm_statedir_t *sd);

#endif /* BM_STATEDIR_H */
