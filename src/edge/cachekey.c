/* SPDX-License-Identifier: MIT */
/*
 * cachekey: the rule table of cacheable Beacon API reads and the key of each (see
 * cachekey.h and docs/cache.md).
 */
#include "edge/cachekey.h"

#include <string.h>

#include "base/err.h"
#include "base/json.h"

typedef enum { ID_BLOCK, ID_STATE, ID_NONE } id_kind_t;

/* A cacheable route: the path up to its id, the kind of id, and the suffixes allowed after
 * it ("" for none; a trailing '*' allows one more segment). */
typedef struct route {
    const char *prefix;
    size_t len;
    id_kind_t kind;
    bm_ck_route_t cls;
    const char *const *suffixes;
} route_t;

static const char *const S_NONE[] = {"", NULL};
static const char *const S_ROOT[] = {"/root", NULL};
static const char *const S_ATT[] = {"/attestations", NULL};
static const char *const S_STATE[] = {"/root",
                                      "/fork",
                                      "/finality_checkpoints",
                                      "/validators",
                                      "/validators/*",
                                      "/validator_balances",
                                      "/committees",
                                      "/sync_committees",
                                      "/randao",
                                      "/pending_deposits",
                                      "/pending_partial_withdrawals",
                                      "/pending_consolidations",
                                      "/proposer_lookahead",
                                      NULL};

#define R(p) p, sizeof(p) - 1

/* every prefix is at least 16 bytes long (match reads bytes 6, 8 and 15 first) */
static const route_t ROUTES[] = {
    {R("/eth/v2/beacon/blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_NONE},
    {R("/eth/v1/beacon/blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_ROOT},
    {R("/eth/v1/beacon/blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_ATT},
    {R("/eth/v2/beacon/blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_ATT},
    {R("/eth/v1/beacon/blinded_blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_NONE},
    {R("/eth/v1/beacon/headers/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_NONE},
    {R("/eth/v1/beacon/rewards/blocks/"), ID_BLOCK, BM_CK_ROUTE_BLOCK, S_NONE},
    {R("/eth/v1/beacon/blob_sidecars/"), ID_BLOCK, BM_CK_ROUTE_BLOB, S_NONE},
    {R("/eth/v1/beacon/blobs/"), ID_BLOCK, BM_CK_ROUTE_BLOB, S_NONE},
    {R("/eth/v1/beacon/states/"), ID_STATE, BM_CK_ROUTE_STATE, S_STATE},
    {R("/eth/v2/debug/beacon/states/"), ID_STATE, BM_CK_ROUTE_STATE, S_NONE},
    {R("/eth/v1/node/identity"), ID_NONE, BM_CK_ROUTE_NODE, S_NONE},
    {R("/eth/v1/node/version"), ID_NONE, BM_CK_ROUTE_NODE, S_NONE},
    {R("/eth/v2/node/version"), ID_NONE, BM_CK_ROUTE_NODE, S_NONE},
};

const char *bm_ck_route_name(bm_ck_route_t r)
{
    static const char *const names[] = {"block", "blob", "state", "node"};
    return (unsigned)r < BM_CK_ROUTE_COUNT ? names[r] : "?";
}

const char *bm_ck_class_name(bm_ck_class_t c)
{
    static const char *const names[] = {"none", "immutable", "chain", "clock"};
    return (unsigned)c <= BM_CK_CLOCK ? names[c] : "?";
}

void bm_ck_dispose(bm_ck_t *ck)
{
    bm_str_dispose(&ck->key);
    bm_str_dispose(&ck->target);
}

static bool suffix_ok(const char *const *allowed, const char *s, size_t n)
{
    for (size_t i = 0; allowed[i]; i++) {
        /* the letter after '/' tells most suffixes apart before their length is taken */
        if (n > 1 && allowed[i][0] && allowed[i][1] != s[1])
            continue;
        size_t al = strlen(allowed[i]);
        if (al && allowed[i][al - 1] == '*') {
            /* the prefix, then one non-empty segment */
            size_t pl = al - 1;
            if (n > pl && memcmp(s, allowed[i], pl) == 0 && !memchr(s + pl, '/', n - pl))
                return true;
        } else if (al == n && memcmp(s, allowed[i], n) == 0) {
            return true;
        }
    }
    return false;
}

/* The route of path[0..n): its id (id, id_len) and the rest after it. */
static const route_t *match(const char *path, size_t n, const char **id, size_t *id_len,
                            const char **rest, size_t *rest_len)
{
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const route_t *r = &ROUTES[i];
        size_t pl = r->len;
        /* every prefix has at least 16 bytes: the version, the area and the resource's first
         * letter tell most routes apart before a comparison of the whole prefix */
        if (n < 16 || path[6] != r->prefix[6] || path[8] != r->prefix[8] ||
            path[15] != r->prefix[15])
            continue;
        if (r->kind == ID_NONE) {
            if (n == pl && memcmp(path, r->prefix, n) == 0) {
                *id = NULL;
                *id_len = 0;
                *rest = path + n;
                *rest_len = 0;
                return r;
            }
            continue;
        }
        if (n <= pl || memcmp(path, r->prefix, pl) != 0)
            continue;
        const char *s = path + pl;
        const char *slash = memchr(s, '/', n - pl);
        size_t il = slash ? (size_t)(slash - s) : n - pl;
        if (il == 0)
            continue;
        const char *after = s + il;
        size_t al = n - pl - il;
        if (!suffix_ok(r->suffixes, after, al))
            continue;
        *id = s;
        *id_len = il;
        *rest = after;
        *rest_len = al;
        return r;
    }
    return NULL;
}

static bool is_root(const char *s, size_t n)
{
    if (n != 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return false;
    for (size_t i = 2; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

/* A slot: decimal digits only (the Beacon API's uint64). */
static bool parse_slot(const char *s, size_t n, uint64_t *out)
{
    return bm_json_parse_u64(s, n, out) == 0;
}

static bool id_is(const char *id, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(id, word, n) == 0;
}

/* The last slot that is final: the finalized checkpoint epoch's first slot. */
static bool final_slot(const bm_ck_chain_t *c, uint64_t *slot)
{
    if (!c->has_finalized || !c->slots_per_epoch)
        return false;
    *slot = c->fin_epoch * c->slots_per_epoch;
    return true;
}

/* What the id resolves to: the class, and the id text to send (a root in lower-case hex, or
 * the id as given). */
typedef struct resolved {
    bm_ck_class_t cls;
    char id[67];
    bool use_id; /* send `id` instead of the client's */
    bool has_root;
    uint8_t root[32];
    uint64_t slot;
    bool justified; /* key carries the justified checkpoint */
    bool final;
} resolved_t;

static void set_root(resolved_t *r, const uint8_t root[32])
{
    bm_root_to_hex(root, r->id);
    r->use_id = true;
}

/* On the chain that may still change: the block `root` at `slot`, asked by `id_root`. */
static void on_chain(resolved_t *r, const uint8_t root[32], uint64_t slot,
                     const uint8_t id_root[32])
{
    r->cls = BM_CK_CHAIN;
    r->has_root = true;
    memcpy(r->root, root, 32);
    r->slot = slot;
    set_root(r, id_root);
}

/* Final: it never changes again; asked by `id_root` when there is one (else as it is). */
static void set_final(resolved_t *r, const uint8_t *id_root)
{
    r->cls = BM_CK_IMMUTABLE;
    r->final = true;
    if (id_root)
        set_root(r, id_root);
}

/* A block id after finality: the root the cluster chain has at that slot, when a block is
 * there (not an empty slot) and the links reach it. */
static void resolve_block_slot(const bm_ck_chain_t *c, uint64_t slot, resolved_t *r)
{
    uint8_t at[32], before[32];
    if (!c->has_head || !c->root_at_slot || slot > c->head_slot)
        return; /* future, or nothing known: asked as it is */
    if (c->root_at_slot(c->ud, slot, at) != 0)
        return;
    if (slot > 0 && (c->root_at_slot(c->ud, slot - 1, before) != 0 || memcmp(at, before, 32) == 0))
        return; /* an empty slot (404 from any node), or unknown */
    on_chain(r, at, slot, at);
}

static void resolve_block(const bm_ck_chain_t *c, const char *id, size_t n, resolved_t *r)
{
    uint64_t slot, fin;
    if (is_root(id, n)) {
        r->cls = BM_CK_IMMUTABLE;
        for (size_t i = 0; i < n; i++)
            r->id[i] = (char)(id[i] >= 'A' && id[i] <= 'F' ? id[i] + 32 : id[i]);
        r->id[1] = 'x';
        r->id[n] = '\0';
        r->use_id = true;
    } else if (id_is(id, n, "genesis")) {
        set_final(r, NULL);
    } else if (id_is(id, n, "head")) {
        if (!c->has_head)
            return;
        on_chain(r, c->head_root, c->head_slot, c->head_root);
    } else if (id_is(id, n, "finalized")) {
        if (!c->has_finalized)
            return;
        set_final(r, c->fin_root);
    } else if (parse_slot(id, n, &slot)) {
        if (final_slot(c, &fin) && slot <= fin)
            set_final(r, NULL);
        else
            resolve_block_slot(c, slot, r);
    }
}

static void resolve_state(const bm_ck_chain_t *c, const char *id, size_t n, resolved_t *r)
{
    uint64_t slot, fin;
    if (is_root(id, n)) {
        resolve_block(c, id, n, r); /* the same text rules */
    } else if (id_is(id, n, "genesis")) {
        set_final(r, NULL);
    } else if (id_is(id, n, "head")) {
        if (!c->has_head || !c->has_head_state)
            return; /* the state root is not known yet: not cached */
        on_chain(r, c->head_root, c->head_slot, c->head_state_root);
    } else if (id_is(id, n, "finalized")) {
        if (!c->has_finalized || !c->has_fin_state)
            return;
        set_final(r, c->fin_state_root);
    } else if (id_is(id, n, "justified")) {
        if (!c->has_justified)
            return;
        r->cls = BM_CK_CHAIN;
        r->justified = true;
    } else if (parse_slot(id, n, &slot)) {
        /* a state after finality has no root to send it by: asked as it is, not cached */
        if (final_slot(c, &fin) && slot <= fin)
            set_final(r, NULL);
    }
}

int bm_ck_derive(const char *path, size_t path_len, const char *query, size_t query_len, bool ssz,
                 const bm_ck_chain_t *chain, const bm_ck_ttls_t *ttls, bm_ck_t *out)
{
    memset(out, 0, sizeof *out);
    out->slot = UINT64_MAX;
    const char *id, *rest;
    size_t id_len, rest_len;
    const route_t *rt = match(path, path_len, &id, &id_len, &rest, &rest_len);
    if (!rt)
        return 0;
    resolved_t r = {.cls = BM_CK_NONE, .slot = UINT64_MAX};
    if (rt->kind == ID_BLOCK)
        resolve_block(chain, id, id_len, &r);
    else if (rt->kind == ID_STATE)
        resolve_state(chain, id, id_len, &r);
    else if (ttls->clock_ms)
        r.cls = BM_CK_CLOCK;
    if (r.cls == BM_CK_NONE)
        return 0;
    out->cls = r.cls;
    out->route = rt->cls;
    out->ssz = ssz;
    out->ttl_ms = r.cls == BM_CK_CHAIN ? ttls->chain_ms : r.cls == BM_CK_CLOCK ? ttls->clock_ms : 0;
    out->final = r.final;
    out->has_root = r.has_root;
    memcpy(out->root, r.root, 32);
    out->slot = r.has_root ? r.slot : UINT64_MAX;
    /* the target: the path with the id replaced (or as it was), then the query */
    bm_str_t *t = &out->target;
    if (r.use_id) {
        bm_str_append(t, path, (size_t)(id - path));
        bm_str_puts(t, r.id);
        bm_str_append(t, rest, rest_len);
        out->rewritten = id_len != strlen(r.id) || memcmp(id, r.id, id_len) != 0;
    } else {
        bm_str_append(t, path, path_len);
    }
    if (query) {
        bm_str_putc(t, '?');
        bm_str_append(t, query, query_len);
    }
    /* the key: the form, the target, and for `justified` the checkpoint it stands for */
    bm_str_puts(&out->key, ssz ? "S " : "J ");
    bm_str_append(&out->key, bm_str_data(t), bm_str_len(t));
    if (r.justified) {
        char jr[67];
        bm_root_to_hex(chain->just_root, jr);
        bm_str_printf(&out->key, "#justified=%s@%llu", jr, (unsigned long long)chain->just_epoch);
    }
    if (t->oom || out->key.oom) {
        bm_ck_dispose(out);
        memset(out, 0, sizeof *out);
        return BM_ENOMEM;
    }
    return 0;
}
