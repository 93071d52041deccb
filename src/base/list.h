/* SPDX-License-Identifier: MIT */
/*
 * list: an intrusive doubly linked list. A struct that lives on a list embeds a bm_link_t;
 * the list is a bm_link_t of its own (the head), circular, so that inserting and unlinking
 * need no special case for the first or the last element and an element can unlink itself
 * without knowing which list holds it. bm_list_entry gets back from a link to the struct
 * around it.
 *
 * Ownership: the list owns nothing; whoever puts an element on a list takes it off before
 * freeing it. An unlinked element points at itself (bm_link_linked is false), so unlinking
 * twice is harmless.
 */
#ifndef BM_LIST_H
#define BM_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bm_link {
    struct bm_link *prev, *next;
} bm_link_t;

/** Makes `l` an empty list, or an element on no list. */
static inline void bm_link_init(bm_link_t *l)
{
    l->prev = l->next = l;
}

/** True when the list whose head is `head` has no element. */
static inline bool bm_list_empty(const bm_link_t *head)
{
    return head->next == head;
}

/** True while `e` is on a list. */
static inline bool bm_link_linked(const bm_link_t *e)
{
    return e->next != e;
}

/** Puts `e` (on no list) first on the list `head`. */
static inline void bm_list_push_front(bm_link_t *head, bm_link_t *e)
{
    e->prev = head;
    e->next = head->next;
    head->next->prev = e;
    head->next = e;
}

/** Puts `e` (on no list) last on the list `head`. */
static inline void bm_list_push_back(bm_link_t *head, bm_link_t *e)
{
    e->next = head;
    e->prev = head->prev;
    head->prev->next = e;
    head->prev = e;
}

/** Takes `e` off its list (nothing when it is on none). */
static inline void bm_link_unlink(bm_link_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}

/**
 * Moves every element of the list `from` onto the empty list `to`, in order, and leaves
 * `from` empty: for walking a list whose elements may join it again while it is walked.
 */
static inline void bm_list_move_all(bm_link_t *to, bm_link_t *from)
{
    if (bm_list_empty(from))
        return;
    to->next = from->next;
    to->prev = from->prev;
    to->next->prev = to;
    to->prev->next = to;
    bm_link_init(from);
}

/** The struct of type `type` whose member `member` is the link `ptr`. */
#define bm_list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/** The first element of a non-empty list, as `type`. */
#define bm_list_first(head, type, member) bm_list_entry((head)->next, type, member)

/** The last element of a non-empty list, as `type`. */
#define bm_list_last(head, type, member) bm_list_entry((head)->prev, type, member)

/**
 * Walks the list `head` with `pos` (a bm_link_t *); `nx` holds the next link, so `pos` may
 * be unlinked (and freed) inside the loop.
 */
#define bm_list_for_each_safe(pos, nx, head)                                                       \
    for ((pos) = (head)->next, (nx) = (pos)->next; (pos) != (head);                                \
         (pos) = (nx), (nx) = (pos)->next)

#endif /* BM_LIST_H */
