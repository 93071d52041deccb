/* SPDX-License-Identifier: MIT */
/*
 * chain: ground-truth chain model. See chain.h. Skips of the canonical branch are
 * memoised per slot (a parent walk over many slots would otherwise hash every slot each
 * time); fork branches are short-lived and computed on the fly.
 */
#include "chain.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

enum {
    F_KNOWN = 1,  /* skip bit computed */
    F_SKIP = 2,   /* no canonical block */
    F_LATE = 4,   /* published late, orphaned */
    F_COMPETE = 8 /* an alternative block exists */
};

typedef struct branch {
    uint64_t first_slot;
    bs_block_id_t base;
} branch_t;

typedef struct scen {
    uint64_t slot;
    uint32_t late_ms;
    uint64_t alt_mask;
} scen_t;

typedef struct committee_cache {
    bool valid;
    uint64_t epoch;
    bs_root_t dep;
    uint32_t *perm;
    uint32_t *pos; /* pos[v] = index of v in perm */
} committee_cache_t;

#define COMMITTEE_CACHE 4

struct bs_chain {
    bs_chain_cfg_t cfg;
    uint8_t *flags; /* per canonical slot */
    size_t nflags;
    branch_t *branches; /* index 0 unused (canonical) */
    size_t nbranches;
    scen_t *scens;
    size_t nscens;
    bool big_values;
    bs_root_t genesis_root;
    committee_cache_t cc[COMMITTEE_CACHE];
    unsigned cc_next;
};

const char *bs_fork_name(bs_fork_t f)
{
    return f == BS_FORK_GLOAS ? "gloas" : "fulu";
}

bool bs_block_id_eq(bs_block_id_t a, bs_block_id_t b)
{
    if (a.slot != b.slot)
        return false;
    return a.slot == 0 || a.branch == b.branch;
}

void bs_chain_cfg_default(bs_chain_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->slot_ms = 12000;
    c->slots_per_epoch = 32;
    c->validators = 64;
    c->nodes = 3;
    c->gloas_epoch = BS_FAR_FUTURE;
}

bs_chain_t *bs_chain_new(const bs_chain_cfg_t *cfg)
{
    if (!cfg->slot_ms || !cfg->slots_per_epoch || !cfg->validators || cfg->skip_rate < 0 ||
        cfg->skip_rate >= 1 || cfg->nodes > BS_MAX_NODES)
        return NULL;
    bs_chain_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cfg = *cfg;
    c->genesis_root = bs_hash(cfg->seed, BS_TAG_GENESIS, 0, 0, 0);
    c->branches = calloc(1, sizeof *c->branches);
    if (!c->branches) {
        free(c);
        return NULL;
    }
    c->nbranches = 1;
    return c;
}

void bs_chain_free(bs_chain_t *c)
{
    if (!c)
        return;
    for (int i = 0; i < COMMITTEE_CACHE; i++) {
        free(c->cc[i].perm);
        free(c->cc[i].pos);
    }
    free(c->flags);
    free(c->branches);
    free(c->scens);
    free(c);
}

const bs_chain_cfg_t *bs_chain_config(const bs_chain_t *c)
{
    return &c->cfg;
}

bm_slot_clock_t bs_chain_clock(const bs_chain_t *c)
{
    bm_slot_clock_t k = {c->cfg.genesis_ms, c->cfg.slot_ms, c->cfg.slots_per_epoch};
    return k;
}

uint64_t bs_chain_slot_at(const bs_chain_t *c, uint64_t now_ms)
{
    bm_slot_clock_t k = bs_chain_clock(c);
    return bm_slot_at(&k, now_ms);
}

uint64_t bs_chain_slot_start(const bs_chain_t *c, uint64_t slot)
{
    return c->cfg.genesis_ms + slot * c->cfg.slot_ms;
}

uint64_t bs_chain_epoch_of(const bs_chain_t *c, uint64_t slot)
{
    return slot / c->cfg.slots_per_epoch;
}

uint64_t bs_chain_epoch_start(const bs_chain_t *c, uint64_t epoch)
{
    return epoch * c->cfg.slots_per_epoch;
}

static scen_t *find_scen(const bs_chain_t *c, uint64_t slot)
{
    for (size_t i = 0; i < c->nscens; i++)
        if (c->scens[i].slot == slot)
            return &c->scens[i];
    return NULL;
}

/* The flags of a canonical slot, computing the skip bit on first use. Returns 0 with
 * F_SKIP set when memory for the memo cannot be had (the slot is computed anyway). */
static uint8_t slot_flags(bs_chain_t *c, uint64_t slot)
{
    if (slot >= c->nflags) {
        size_t want = c->nflags ? c->nflags : 1024;
        while (want <= slot)
            want *= 2;
        uint8_t *nf = realloc(c->flags, want);
        if (nf) {
            memset(nf + c->nflags, 0, want - c->nflags);
            c->flags = nf;
            c->nflags = want;
        }
    }
    uint8_t f = slot < c->nflags ? c->flags[slot] : 0;
    if (!(f & F_KNOWN)) {
        f |= F_KNOWN;
        if (slot > 0 && c->cfg.skip_rate > 0 &&
            bs_hash_unit(c->cfg.seed, BS_TAG_SKIP, 0, slot, 0) < c->cfg.skip_rate)
            f |= F_SKIP;
        if (slot < c->nflags)
            c->flags[slot] = f;
    }
    return f;
}

static bool branch_skipped(const bs_chain_t *c, uint32_t branch, uint64_t slot)
{
    return c->cfg.skip_rate > 0 &&
           bs_hash_unit(c->cfg.seed, BS_TAG_SKIP, branch, slot, 0) < c->cfg.skip_rate;
}

bool bs_chain_skipped(bs_chain_t *c, uint64_t slot)
{
    return (slot_flags(c, slot) & F_SKIP) != 0;
}

bool bs_chain_exists(bs_chain_t *c, bs_block_id_t id)
{
    if (id.slot == 0)
        return true;
    if (id.branch == BS_BRANCH_CANON)
        return !(slot_flags(c, id.slot) & F_SKIP);
    if (id.branch == BS_BRANCH_ALT)
        return (slot_flags(c, id.slot) & F_COMPETE) != 0;
    if (id.branch >= c->nbranches)
        return false;
    const branch_t *b = &c->branches[id.branch];
    return id.slot >= b->first_slot && !branch_skipped(c, id.branch, id.slot);
}

static bs_block_id_t canon_parent(bs_chain_t *c, uint64_t slot)
{
    for (uint64_t t = slot; t-- > 0;) {
        uint8_t f = slot_flags(c, t);
        if (t == 0 || !(f & (F_SKIP | F_LATE)))
            return (bs_block_id_t){BS_BRANCH_CANON, t};
    }
    return (bs_block_id_t){BS_BRANCH_CANON, 0};
}

bool bs_chain_parent(bs_chain_t *c, bs_block_id_t id, bs_block_id_t *parent)
{
    if (id.slot == 0)
        return false;
    if (id.branch == BS_BRANCH_CANON || id.branch == BS_BRANCH_ALT || id.branch >= c->nbranches) {
        *parent = canon_parent(c, id.slot);
        return true;
    }
    const branch_t *b = &c->branches[id.branch];
    for (uint64_t t = id.slot; t-- > b->first_slot;) {
        if (!branch_skipped(c, id.branch, t)) {
            *parent = (bs_block_id_t){id.branch, t};
            return true;
        }
    }
    *parent = b->base;
    return true;
}

bs_root_t bs_chain_genesis_root(const bs_chain_t *c)
{
    return c->genesis_root;
}

bs_root_t bs_chain_root(const bs_chain_t *c, bs_block_id_t id)
{
    if (id.slot == 0)
        return c->genesis_root;
    return bs_hash(c->cfg.seed, BS_TAG_ROOT, id.branch, id.slot, 0);
}

bs_root_t bs_chain_state_root(const bs_chain_t *c, bs_block_id_t id)
{
    return bs_hash(c->cfg.seed, BS_TAG_STATE, id.slot ? id.branch : 0, id.slot, 0);
}

bs_root_t bs_chain_body_root(const bs_chain_t *c, bs_block_id_t id)
{
    return bs_hash(c->cfg.seed, BS_TAG_BODY, id.slot ? id.branch : 0, id.slot, 0);
}

bs_root_t bs_chain_exec_hash(const bs_chain_t *c, bs_block_id_t id)
{
    return bs_hash(c->cfg.seed, BS_TAG_EXEC, id.slot ? id.branch : 0, id.slot, 0);
}

uint64_t bs_chain_publish_ms(bs_chain_t *c, bs_block_id_t id)
{
    uint64_t t = bs_chain_slot_start(c, id.slot);
    if (id.branch == BS_BRANCH_CANON && (slot_flags(c, id.slot) & F_LATE)) {
        const scen_t *s = find_scen(c, id.slot);
        if (s)
            t += s->late_ms;
    }
    return t;
}

bs_block_id_t bs_chain_block_at(bs_chain_t *c, bs_block_id_t head, uint64_t slot)
{
    bs_block_id_t cur = head;
    while (cur.slot > slot) {
        bs_block_id_t p;
        if (!bs_chain_parent(c, cur, &p))
            break;
        cur = p;
    }
    return cur;
}

bool bs_chain_is_ancestor(bs_chain_t *c, bs_block_id_t anc, bs_block_id_t desc)
{
    if (anc.slot > desc.slot)
        return false;
    return bs_block_id_eq(bs_chain_block_at(c, desc, anc.slot), anc);
}

bs_block_id_t bs_chain_common_ancestor(bs_chain_t *c, bs_block_id_t a, bs_block_id_t b)
{
    while (!bs_block_id_eq(a, b)) {
        bs_block_id_t p;
        if (a.slot >= b.slot) {
            if (!bs_chain_parent(c, a, &p))
                return a;
            a = p;
        } else {
            if (!bs_chain_parent(c, b, &p))
                return b;
            b = p;
        }
    }
    return a;
}

bs_block_id_t bs_chain_canon_at(bs_chain_t *c, uint64_t slot)
{
    for (uint64_t t = slot + 1; t-- > 0;) {
        uint8_t f = slot_flags(c, t);
        if (t == 0 || !(f & (F_SKIP | F_LATE)))
            return (bs_block_id_t){BS_BRANCH_CANON, t};
    }
    return (bs_block_id_t){BS_BRANCH_CANON, 0};
}

bs_root_t bs_chain_dependent_root(bs_chain_t *c, bs_block_id_t head, uint64_t epoch,
                                  unsigned lookback)
{
    if (epoch <= lookback)
        return c->genesis_root;
    uint64_t slot = bs_chain_epoch_start(c, epoch - lookback) - 1;
    return bs_chain_root(c, bs_chain_block_at(c, head, slot));
}

bs_fork_t bs_chain_fork_at(const bs_chain_t *c, uint64_t slot)
{
    if (c->cfg.gloas_epoch == BS_FAR_FUTURE)
        return BS_FORK_FULU;
    return slot / c->cfg.slots_per_epoch >= c->cfg.gloas_epoch ? BS_FORK_GLOAS : BS_FORK_FULU;
}

uint32_t bs_chain_new_branch(bs_chain_t *c, bs_block_id_t base, uint64_t first_slot)
{
    branch_t *nb = realloc(c->branches, (c->nbranches + 1) * sizeof *nb);
    if (!nb)
        return 0;
    c->branches = nb;
    nb[c->nbranches].first_slot = first_slot > base.slot ? first_slot : base.slot + 1;
    nb[c->nbranches].base = base;
    return (uint32_t)c->nbranches++;
}

static scen_t *add_scen(bs_chain_t *c, uint64_t slot)
{
    scen_t *s = find_scen(c, slot);
    if (s)
        return s;
    scen_t *ns = realloc(c->scens, (c->nscens + 1) * sizeof *ns);
    if (!ns)
        return NULL;
    c->scens = ns;
    s = &ns[c->nscens++];
    memset(s, 0, sizeof *s);
    s->slot = slot;
    return s;
}

static void force_block(bs_chain_t *c, uint64_t slot, uint8_t add)
{
    slot_flags(c, slot);
    if (slot < c->nflags)
        c->flags[slot] = (uint8_t)((c->flags[slot] & ~F_SKIP) | add);
}

int bs_chain_set_late(bs_chain_t *c, uint64_t slot, uint32_t delay_ms)
{
    if (slot == 0 || delay_ms >= c->cfg.slot_ms)
        return BM_EINVAL;
    slot_flags(c, slot + 1);
    if (slot + 1 >= c->nflags)
        return BM_ENOMEM;
    if (slot_flags(c, slot) & F_COMPETE)
        return BM_EINVAL;
    scen_t *s = add_scen(c, slot);
    if (!s)
        return BM_ENOMEM;
    s->late_ms = delay_ms;
    force_block(c, slot, F_LATE);
    force_block(c, slot + 1, 0); /* the re-orging proposer of slot+1 is there */
    return 0;
}

int bs_chain_set_competing(bs_chain_t *c, uint64_t slot, uint64_t mask)
{
    if (slot == 0)
        return BM_EINVAL;
    uint32_t n = c->cfg.nodes;
    uint64_t all = n >= 64 ? UINT64_MAX : ((uint64_t)1 << n) - 1;
    mask &= all;
    if (mask == 0 || mask == all)
        return BM_EINVAL;
    /* the alternative is the minority block */
    if ((unsigned)__builtin_popcountll(mask) * 2 > n)
        mask = all & ~mask;
    slot_flags(c, slot + 1);
    if (slot + 1 >= c->nflags)
        return BM_ENOMEM;
    if (slot_flags(c, slot) & F_LATE)
        return BM_EINVAL;
    scen_t *s = add_scen(c, slot);
    if (!s)
        return BM_ENOMEM;
    s->alt_mask = mask;
    force_block(c, slot, F_COMPETE);
    force_block(c, slot + 1, 0);
    return 0;
}

void bs_chain_set_gloas_epoch(bs_chain_t *c, uint64_t epoch)
{
    c->cfg.gloas_epoch = epoch;
}

void bs_chain_set_big_values(bs_chain_t *c, bool on)
{
    c->big_values = on;
}

bool bs_chain_big_values(const bs_chain_t *c)
{
    return c->big_values;
}

void bs_chain_slot_info(bs_chain_t *c, uint64_t slot, bs_slot_info_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t f = slot_flags(c, slot);
    out->skipped = slot > 0 && (f & F_SKIP);
    out->late = (f & F_LATE) != 0;
    out->competing = (f & F_COMPETE) != 0;
    const scen_t *s = find_scen(c, slot);
    if (s) {
        out->late_ms = out->late ? s->late_ms : 0;
        out->alt_mask = out->competing ? s->alt_mask : 0;
    }
}

bool bs_chain_sees_alt(bs_chain_t *c, uint64_t slot, uint32_t node)
{
    if (!(slot_flags(c, slot) & F_COMPETE) || node >= 64)
        return false;
    const scen_t *s = find_scen(c, slot);
    return s && (s->alt_mask >> node & 1);
}

bool bs_chain_block_for(bs_chain_t *c, uint32_t branch, uint64_t slot, uint32_t node,
                        bs_block_id_t *out)
{
    if (branch == BS_BRANCH_CANON && bs_chain_sees_alt(c, slot, node)) {
        *out = (bs_block_id_t){BS_BRANCH_ALT, slot};
        return true;
    }
    bs_block_id_t id = {branch, slot};
    if (!bs_chain_exists(c, id))
        return false;
    *out = id;
    return true;
}

bool bs_chain_is_late(bs_chain_t *c, bs_block_id_t id)
{
    return id.branch == BS_BRANCH_CANON && id.slot > 0 && (slot_flags(c, id.slot) & F_LATE);
}

void bs_u128_dec(bs_u128_t v, char out[48])
{
    char tmp[48];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = 0;
}

void bs_chain_block_values(const bs_chain_t *c, uint32_t node, uint64_t slot, bool big,
                           bs_u128_t *exec_value, bs_u128_t *cons_value)
{
    uint64_t h1 = bs_hash_u64(c->cfg.seed, BS_TAG_VALUE, node, slot, 1);
    uint64_t h2 = bs_hash_u64(c->cfg.seed, BS_TAG_VALUE, node, slot, 2);
    if (big || c->big_values) {
        /* execution value above 2^64, consensus value above 2^63 */
        *exec_value = ((bs_u128_t)1 << 64) * (1 + node % 3) + (h1 >> 4);
        *cons_value = ((bs_u128_t)1 << 63) + (h2 >> 8);
    } else {
        *exec_value = (bs_u128_t)10000000000000000ull + h1 % 90000000000000000ull;
        *cons_value = (bs_u128_t)1000000000000000ull + h2 % 9000000000000000ull;
    }
}

void bs_chain_pubkey(const bs_chain_t *c, uint32_t validator, uint8_t out[48])
{
    bs_root_t a = bs_hash(c->cfg.seed, BS_TAG_PUBKEY, validator, 0, 0);
    bs_root_t b = bs_hash(c->cfg.seed, BS_TAG_PUBKEY, validator, 1, 0);
    memcpy(out, a.b, 32);
    memcpy(out + 32, b.b, 16);
    out[0] = (uint8_t)(0x80 | (out[0] & 0x1f)); /* compressed-point flag, like real keys */
}

int64_t bs_chain_validator_by_pubkey(const bs_chain_t *c, const uint8_t pk[48])
{
    for (uint32_t v = 0; v < c->cfg.validators; v++) {
        uint8_t k[48];
        bs_chain_pubkey(c, v, k);
        if (memcmp(k, pk, 48) == 0)
            return v;
    }
    return -1;
}

uint32_t bs_chain_proposer(const bs_chain_t *c, const bs_root_t *dep, uint64_t slot)
{
    bs_root_t h = bs_hash_root(c->cfg.seed, BS_TAG_PROPOSER, dep, slot, 0);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | h.b[i];
    return (uint32_t)(v % c->cfg.validators);
}

typedef struct sort_item {
    uint64_t key;
    uint32_t v;
} sort_item_t;

static int cmp_item(const void *a, const void *b)
{
    const sort_item_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

/* The committee permutation of an epoch under a dependent root, from a small cache. */
static const committee_cache_t *committees(bs_chain_t *c, const bs_root_t *dep, uint64_t epoch)
{
    for (int i = 0; i < COMMITTEE_CACHE; i++)
        if (c->cc[i].valid && c->cc[i].epoch == epoch && bs_root_eq(&c->cc[i].dep, dep))
            return &c->cc[i];
    uint32_t n = c->cfg.validators;
    sort_item_t *items = malloc(n * sizeof *items);
    committee_cache_t *e = &c->cc[c->cc_next];
    uint32_t *perm = malloc(n * sizeof *perm), *pos = malloc(n * sizeof *pos);
    if (!items || !perm || !pos) {
        free(items);
        free(perm);
        free(pos);
        return NULL;
    }
    for (uint32_t v = 0; v < n; v++) {
        bs_root_t h = bs_hash_root(c->cfg.seed, BS_TAG_ATTESTER, dep, epoch, v);
        uint64_t k = 0;
        for (int i = 7; i >= 0; i--)
            k = k << 8 | h.b[i];
        items[v].key = k;
        items[v].v = v;
    }
    qsort(items, n, sizeof *items, cmp_item);
    for (uint32_t i = 0; i < n; i++) {
        perm[i] = items[i].v;
        pos[items[i].v] = i;
    }
    free(items);
    free(e->perm);
    free(e->pos);
    e->perm = perm;
    e->pos = pos;
    e->epoch = epoch;
    e->dep = *dep;
    e->valid = true;
    c->cc_next = (c->cc_next + 1) % COMMITTEE_CACHE;
    return e;
}

int bs_chain_attester_duty(bs_chain_t *c, const bs_root_t *dep, uint64_t epoch, uint32_t v,
                           bs_attester_duty_t *out)
{
    if (v >= c->cfg.validators)
        return BM_ENOTFOUND;
    const committee_cache_t *e = committees(c, dep, epoch);
    if (!e)
        return BM_ENOMEM;
    uint64_t n = c->cfg.validators, spe = c->cfg.slots_per_epoch;
    uint64_t p = e->pos[v];
    /* slot k holds perm[k*n/spe .. (k+1)*n/spe) */
    uint64_t k = (p * spe + spe - 1) / n;
    while (k > 0 && k * n / spe > p)
        k--;
    while ((k + 1) * n / spe <= p)
        k++;
    uint64_t lo = k * n / spe, hi = (k + 1) * n / spe;
    out->slot = epoch * spe + k;
    out->committee_index = 0;
    out->committee_length = (uint32_t)(hi - lo);
    out->committees_at_slot = 1;
    out->validator_committee_index = (uint32_t)(p - lo);
    return 0;
}

uint32_t bs_chain_committee_length(bs_chain_t *c, const bs_root_t *dep, uint64_t slot)
{
    (void)dep;
    uint64_t n = c->cfg.validators, spe = c->cfg.slots_per_epoch;
    uint64_t k = slot % spe;
    return (uint32_t)((k + 1) * n / spe - k * n / spe);
}

size_t bs_chain_sync_positions(const bs_chain_t *c, uint64_t epoch, uint32_t v, uint32_t *pos,
                               size_t max)
{
    uint64_t period = epoch / BS_EPOCHS_PER_SYNC_PERIOD;
    size_t n = 0;
    for (uint32_t p = 0; p < BS_SYNC_COMMITTEE_SIZE && n < max; p++)
        if (bs_hash_u64(c->cfg.seed, BS_TAG_SYNC, period, p, 0) % c->cfg.validators == v)
            pos[n++] = p;
    return n;
}

size_t bs_chain_ptc_members(const bs_chain_t *c, const bs_root_t *dep, uint64_t slot, uint32_t *out)
{
    size_t n = 0;
    uint32_t want = c->cfg.validators < BS_PTC_MEMBERS ? c->cfg.validators : BS_PTC_MEMBERS;
    for (uint32_t j = 0; j < want; j++) {
        bs_root_t h = bs_hash_root(c->cfg.seed, BS_TAG_PTC, dep, slot, j);
        uint32_t v = (uint32_t)((h.b[0] | h.b[1] << 8 | h.b[2] << 16 | (uint32_t)h.b[3] << 24) %
                                c->cfg.validators);
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup |= out[i] == v;
        if (!dup)
            out[n++] = v;
    }
    return n;
}
