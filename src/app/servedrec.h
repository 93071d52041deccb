/* SPDX-License-Identifier: MIT */
/*
 * servedrec: a served duty read (duties/serve.h bm_served_t) as one line of text, so that
 * instances sharing state through Redis can publish their duty journal records to each
 * other (app/sharing.c). Nodes are named by their configured upstream ids, not by pool
 * index: the receiving instance maps each id to its own node, and a class or node whose id
 * it does not have is left out (the record still counts; it names no node of its own).
 *
 * The line: "<started_ms> <race_ms> <requests> <node> <served> <first node> <first>
 * <classes>", where a node is an upstream id or "-", an answer is
 * "<status>,<0x root | ->,<index>,<class>,<ms>" and the classes are "<id>=<class>" joined
 * by ";" for the nodes asked ("-" when none). The duty and slot travel in the record's key.
 * Pure: no I/O; parsing never trusts the text (every number bounded, every field checked).
 */
#ifndef BM_SERVEDREC_H
#define BM_SERVEDREC_H

#include <stddef.h>

#include "base/buf.h"
#include "duties/serve.h"

/** The id of the node at pool index `i`, or NULL when there is none. */
typedef const char *(*bm_servedrec_id_fn)(void *ud, int i);

/** The pool index of the node with id `id`, or -1 when none is configured under it. */
typedef int (*bm_servedrec_index_fn)(void *ud, const char *id);

/** Appends `s` (without its duty and slot) to `out`. Returns 0 or BM_ENOMEM. */
int bm_servedrec_format(bm_str_t *out, const bm_served_t *s, bm_servedrec_id_fn id_of, void *ud);

/** Reads a line back into `s` (its duty and slot left as they are; n_nodes = `n_nodes`).
 *  Returns 0 or BM_EINVAL. */
int bm_servedrec_parse(const char *line, size_t len, bm_served_t *s, size_t n_nodes,
                       bm_servedrec_index_fn index_of, void *ud);

#endif /* BM_SERVEDREC_H */
