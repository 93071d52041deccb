/* SPDX-License-Identifier: MIT */
/*
 * indexed: the merge of the nodes' answers to one batch write (a pool or publish POST whose
 * body is a list: attestations, sync committee messages, contributions, aggregates...).
 *
 * A node that refuses some items of a batch answers the Beacon API's indexed error,
 * {"code":400,"message":...,"failures":[{"index":N,"message":...}]}, and takes the others.
 * Behind beaconmux every node gets the batch, and the nodes gossip to each other, so a node
 * often refuses an item because another node already published it: a real Lodestar v1.5.1
 * answers 500 with `PublishError.Duplicate` for every sync committee contribution another
 * node gossiped first. Relaying one node's error would tell the validator client that items
 * failed that every node has. So the answers are merged, item by item:
 *   - an item failed only if it failed on every node that answered (a node that did not
 *     answer at all, a network failure, says nothing about any item);
 *   - an item a node calls duplicate, already known or already seen counts as taken;
 *   - a 2xx takes every item; an error that lists no items takes none;
 *   - the merged answer is 200 when every item was taken somewhere, else 400 with only the
 *     items that failed everywhere, each with every node's message.
 *
 * Pure bookkeeping over the answers' status and body: no I/O, no clock.
 */
#ifndef BM_INDEXED_H
#define BM_INDEXED_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

typedef struct bm_indexed bm_indexed_t;

/** An empty merge. NULL on allocation failure. */
bm_indexed_t *bm_indexed_new(void);

/** Frees the merge. NULL is ignored. */
void bm_indexed_free(bm_indexed_t *m);

/**
 * Takes node `node`'s HTTP answer (`node` < 64, the pool index; `id` names it in messages;
 * copied). A 2xx takes every item; an error whose body is an indexed error takes every item
 * it does not list as failed (and those it calls duplicates); an error whose message lists
 * only duplicates, one per line (Lodestar v1.5.1's 500 "PublishError.Duplicate" or "Multiple
 * errors on ...\nPublishError.Duplicate\n...", without indexes), takes every item and counts
 * as an indexed error; any other error takes none.
 * A node's later answer (a retry) replaces its earlier one. Returns true when the body was
 * an indexed error.
 */
bool bm_indexed_add(bm_indexed_t *m, size_t node, const char *id, int status, const bm_buf_t *body);

/** True when some node answered an indexed error: the merge then has the answer. */
bool bm_indexed_active(const bm_indexed_t *m);

/** True when every item was taken by some node that answered (only meaningful when active:
 *  an item no indexed error lists was taken by the node that answered it). */
bool bm_indexed_all_taken(const bm_indexed_t *m);

/**
 * The merged answer: 200 with no body (*body NULL) when every item was taken somewhere, else
 * 400 with an IndexedErrorMessage (a new buffer in *body, the caller's reference) listing the
 * items that failed on every node that answered, in index order, each with every node's
 * message ("a: ...; b: ..."). Returns the status, or BM_ENOMEM.
 */
int bm_indexed_answer(const bm_indexed_t *m, bm_buf_t **body);

/** Whether a node's failure message says the item was taken already: it contains
 *  "duplicate", "already known" or "already seen", in any case, with or without spaces,
 *  underscores or dots between the words (PublishError.Duplicate, ALREADY_KNOWN, ...). */
bool bm_indexed_is_duplicate(const char *msg);

#endif /* BM_INDEXED_H */
