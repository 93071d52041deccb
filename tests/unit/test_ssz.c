/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for ssz. A tiny serializer in this file builds the API payloads by the SSZ
 * container rule (fixed parts with 4-byte offsets, then variable parts); each test checks
 * one row of the tables in SSZ-LAYOUT.md twice: that the serializer put the field at the
 * documented absolute position, and that the reader returns it. Then every truncation, bad
 * offset and impossible header combination must give BM_EINVAL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/ssz.h"

/* ---- a tiny SSZ writer ------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t len;
} bytes_t;

static void put(bytes_t *b, const void *p, size_t n)
{
    b->p = realloc(b->p, b->len + n + 1);
    assert_non_null(b->p);
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_u32(bytes_t *b, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, t, 4);
}

static void put_u64(bytes_t *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_fill(bytes_t *b, uint8_t byte, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(b, &byte, 1);
}

static void set_u32(bytes_t *b, size_t at, uint32_t v)
{
    assert_true(at + 4 <= b->len);
    b->p[at] = (uint8_t)v;
    b->p[at + 1] = (uint8_t)(v >> 8);
    b->p[at + 2] = (uint8_t)(v >> 16);
    b->p[at + 3] = (uint8_t)(v >> 24);
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A container whose fields are all variable-size: n offsets, then the parts. */
static bytes_t container(const bytes_t *parts, size_t n)
{
    bytes_t b = {0};
    size_t off = 4 * n;
    for (size_t i = 0; i < n; i++) {
        put_u32(&b, (uint32_t)off);
        off += parts[i].len;
    }
    for (size_t i = 0; i < n; i++)
        put(&b, parts[i].p, parts[i].len);
    return b;
}

static const uint64_t SLOT = 0x0102030405060708ULL;
static const uint64_t PROPOSER = 0x1112131415161718ULL;

static void root_of(uint8_t seed, uint8_t r[32])
{
    for (int i = 0; i < 32; i++)
        r[i] = (uint8_t)(seed + i);
}

/* BeaconBlock {slot, proposer_index, parent_root, state_root, body} with a dummy body. */
static bytes_t beacon_block(uint64_t slot, uint64_t proposer, size_t body_len)
{
    bytes_t b = {0};
    uint8_t parent[32], state[32];
    root_of(0xa0, parent);
    root_of(0x40, state);
    put_u64(&b, slot);
    put_u64(&b, proposer);
    put(&b, parent, 32);
    put(&b, state, 32);
    put_u32(&b, 84);
    put_fill(&b, 0xbb, body_len);
    return b;
}

/* Signed* {message, signature}. */
static bytes_t signed_of(const bytes_t *msg)
{
    bytes_t b = {0};
    put_u32(&b, 100);
    put_fill(&b, 0x5a, 96);
    put(&b, msg->p, msg->len);
    return b;
}

static bytes_t filler(uint8_t byte, size_t n)
{
    bytes_t b = {0};
    put_fill(&b, byte, n);
    if (!b.p)
        b.p = malloc(1);
    return b;
}

static void drop(bytes_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = 0;
}

/* Checks that the documented absolute positions hold the fields, then that the reader
 * finds them, and that every shorter buffer below min_ok is refused. */
static void check_block_row(const bytes_t *b, const char *fork, bool blinded, bool included,
                            int kind, size_t slot_at, size_t min_ok)
{
    uint8_t parent[32], state[32];
    root_of(0xa0, parent);
    root_of(0x40, state);
    assert_true(get_u64(b->p + slot_at) == SLOT);
    assert_true(get_u64(b->p + slot_at + 8) == PROPOSER);
    assert_memory_equal(b->p + slot_at + 16, parent, 32);

    bm_ssz_block_info_t out;
    memset(&out, 0, sizeof out);
    assert_int_equal(bm_ssz_block_info(b->p, b->len, fork, blinded, included, kind, &out), 0);
    assert_true(out.slot == SLOT);
    assert_true(out.proposer_index == PROPOSER);
    assert_memory_equal(out.parent_root, parent, 32);
    assert_memory_equal(out.state_root, state, 32);
    assert_int_equal(out.block_offset, slot_at);

    for (size_t n = 0; n < b->len; n++) {
        /* A heap copy of exactly n bytes, so that ASan sees any read past the end. */
        uint8_t *t = malloc(n ? n : 1);
        memcpy(t, b->p, n);
        bm_ssz_block_info_t o2 = {0};
        int rc = bm_ssz_block_info(n ? t : NULL, n, fork, blinded, included, kind, &o2);
        if (n < min_ok) {
            assert_int_equal(rc, BM_EINVAL);
            assert_true(o2.slot == 0); /* output untouched on error */
        } else {
            assert_int_equal(rc, 0);
            assert_true(o2.slot == SLOT);
        }
        free(t);
    }
}

/* ---- block rows ------------------------------------------------------------------- */

static void test_row_beacon_block(void **state)
{
    (void)state;
    bytes_t blk = beacon_block(SLOT, PROPOSER, 200);
    const char *forks[] = {"phase0", "altair", "bellatrix", "capella"};
    for (size_t i = 0; i < 4; i++)
        check_block_row(&blk, forks[i], false, false, BM_SSZ_BLOCK_PRODUCE_V3, 0, 84);
    /* produceBlockV4 with Eth-Execution-Payload-Included: false */
    check_block_row(&blk, "gloas", false, false, BM_SSZ_BLOCK_PRODUCE_V4, 0, 84);
    drop(&blk);
}

static void test_row_blinded_beacon_block(void **state)
{
    (void)state;
    bytes_t blk = beacon_block(SLOT, PROPOSER, 150);
    const char *forks[] = {"bellatrix", "capella", "deneb", "electra", "fulu"};
    for (size_t i = 0; i < 5; i++)
        check_block_row(&blk, forks[i], true, false, BM_SSZ_BLOCK_PRODUCE_V3, 0, 84);
    drop(&blk);
}

static void test_row_block_contents(void **state)
{
    (void)state;
    bytes_t parts[3] = {beacon_block(SLOT, PROPOSER, 300), filler(0xc1, 48), filler(0xc2, 64)};
    bytes_t bc = container(parts, 3);
    assert_int_equal(bm_ssz_u32(bc.p), 12);
    size_t last = bm_ssz_u32(bc.p + 8);
    const char *forks[] = {"deneb", "electra", "fulu"};
    for (size_t i = 0; i < 3; i++)
        check_block_row(&bc, forks[i], false, false, BM_SSZ_BLOCK_PRODUCE_V3, 12, last);
    bm_ssz_block_info_t out;
    assert_int_equal(
        bm_ssz_block_info(bc.p, bc.len, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3, &out), 0);
    assert_int_equal(out.block_len, parts[0].len);
    /* Empty kzg_proofs and blobs: all offsets equal at the end. */
    bytes_t parts2[3] = {parts[0], filler(0, 0), filler(0, 0)};
    bytes_t bc2 = container(parts2, 3);
    check_block_row(&bc2, "fulu", false, false, BM_SSZ_BLOCK_PRODUCE_V3, 12, bc2.len);
    drop(&bc2);
    drop(&parts2[1]);
    drop(&parts2[2]);
    for (int i = 0; i < 3; i++)
        drop(&parts[i]);
    drop(&bc);
}

static void test_row_block_contents_gloas(void **state)
{
    (void)state;
    bytes_t env = {0};
    put_u32(&env, 80);
    put_u32(&env, 80 + 10);
    put_u64(&env, 7);
    put_fill(&env, 0xe1, 32);
    put_fill(&env, 0xe2, 32);
    put_fill(&env, 0xe3, 10 + 20);
    bytes_t parts[4] = {beacon_block(SLOT, PROPOSER, 250), env, filler(0xc1, 48), filler(0xc2, 64)};
    bytes_t bc = container(parts, 4);
    assert_int_equal(bm_ssz_u32(bc.p), 16);
    size_t last = bm_ssz_u32(bc.p + 12);
    check_block_row(&bc, "gloas", false, true, BM_SSZ_BLOCK_PRODUCE_V4, 16, last);
    /* Later forks are read like gloas. */
    check_block_row(&bc, "heze", false, true, BM_SSZ_BLOCK_PRODUCE_V4, 16, last);
    check_block_row(&bc, "zeta", false, true, BM_SSZ_BLOCK_PRODUCE_V4, 16, last);
    for (int i = 0; i < 4; i++)
        drop(&parts[i]);
    drop(&bc);
}

static void test_row_signed_beacon_block(void **state)
{
    (void)state;
    bytes_t blk = beacon_block(SLOT, PROPOSER, 120);
    bytes_t sb = signed_of(&blk);
    /* publishBlockV2 for phase0..capella and gloas */
    const char *forks[] = {"phase0", "altair", "bellatrix", "capella", "gloas"};
    for (size_t i = 0; i < 5; i++)
        check_block_row(&sb, forks[i], false, false, BM_SSZ_BLOCK_PUBLISH, 100, 184);
    /* publishBlindedBlockV2 */
    const char *bforks[] = {"bellatrix", "capella", "deneb", "electra", "fulu"};
    for (size_t i = 0; i < 5; i++)
        check_block_row(&sb, bforks[i], true, false, BM_SSZ_BLOCK_PUBLISH, 100, 184);
    /* getBlockV2 / getBlindedBlock, any fork */
    const char *all[] = {"phase0", "deneb", "fulu", "gloas", "heze"};
    for (size_t i = 0; i < 5; i++)
        check_block_row(&sb, all[i], false, false, BM_SSZ_BLOCK_SIGNED, 100, 184);
    drop(&blk);
    drop(&sb);
}

static void test_row_signed_block_contents(void **state)
{
    (void)state;
    bytes_t blk = beacon_block(SLOT, PROPOSER, 220);
    bytes_t parts[3] = {signed_of(&blk), filler(0xc1, 48), filler(0xc2, 131)};
    bytes_t sbc = container(parts, 3);
    assert_int_equal(bm_ssz_u32(sbc.p), 12);
    assert_int_equal(bm_ssz_u32(sbc.p + 12), 100);
    size_t last = bm_ssz_u32(sbc.p + 8);
    const char *forks[] = {"deneb", "electra", "fulu"};
    for (size_t i = 0; i < 3; i++)
        check_block_row(&sbc, forks[i], false, false, BM_SSZ_BLOCK_PUBLISH, 112, last);
    for (int i = 0; i < 3; i++)
        drop(&parts[i]);
    drop(&blk);
    drop(&sbc);
}

/* ---- what must be refused --------------------------------------------------------- */

static int info(const bytes_t *b, const char *fork, bool blinded, bool included, int kind)
{
    bm_ssz_block_info_t out;
    return bm_ssz_block_info(b->p, b->len, fork, blinded, included, kind, &out);
}

static void test_slot_looks_like_offset(void **state)
{
    (void)state;
    /* A BeaconBlock at slot 12: its first 4 bytes read as 12, like a BlockContents table.
     * The headers decide, and the wrong choice fails the offset checks. */
    bytes_t blk = beacon_block(12, 3, 100);
    bm_ssz_block_info_t out;
    assert_int_equal(
        bm_ssz_block_info(blk.p, blk.len, "capella", false, false, BM_SSZ_BLOCK_PRODUCE_V3, &out),
        0);
    assert_true(out.slot == 12 && out.proposer_index == 3);
    assert_int_equal(
        bm_ssz_block_info(blk.p, blk.len, "deneb", true, false, BM_SSZ_BLOCK_PRODUCE_V3, &out), 0);
    assert_int_equal(info(&blk, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    drop(&blk);
    blk = beacon_block(16, 3, 100);
    assert_int_equal(info(&blk, "gloas", false, true, BM_SSZ_BLOCK_PRODUCE_V4), BM_EINVAL);
    assert_int_equal(info(&blk, "gloas", false, false, BM_SSZ_BLOCK_PRODUCE_V4), 0);
    drop(&blk);
}

static void test_bad_offsets(void **state)
{
    (void)state;
    /* body offset */
    bytes_t blk = beacon_block(SLOT, PROPOSER, 100);
    const uint32_t bad_body[] = {0, 83, 85, 100, 0xffffffffu};
    for (size_t i = 0; i < 5; i++) {
        set_u32(&blk, 80, bad_body[i]);
        assert_int_equal(info(&blk, "capella", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    }
    set_u32(&blk, 80, 84);

    /* BlockContents: first offset, order, range, block too short */
    bytes_t parts[3] = {blk, filler(0xc1, 48), filler(0xc2, 64)};
    bytes_t bc = container(parts, 3);
    assert_int_equal(info(&bc, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3), 0);
    uint32_t o1 = bm_ssz_u32(bc.p + 4), o2 = bm_ssz_u32(bc.p + 8);
    const uint32_t first[] = {0, 11, 13, 16, 84};
    for (size_t i = 0; i < 5; i++) {
        set_u32(&bc, 0, first[i]);
        assert_int_equal(info(&bc, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    }
    set_u32(&bc, 0, 12);
    {
        /* Consistent in every other way: a 4-byte gap after the table, offsets shifted
         * by 4, the block intact at 16. Only the first-offset rule rejects it. */
        bytes_t gap = {0};
        put_u32(&gap, 16);
        put_u32(&gap, o1 + 4);
        put_u32(&gap, o2 + 4);
        put_u32(&gap, 0);
        put(&gap, bc.p + 12, bc.len - 12);
        assert_int_equal(info(&gap, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
        set_u32(&gap, 0, 12); /* a table that claims its first part starts at 12 ... */
        set_u32(&gap, 4, o1); /* ... reads the 4 zero bytes as the block's start */
        set_u32(&gap, 8, o2);
        assert_int_equal(info(&gap, "deneb", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
        drop(&gap);
    }
    set_u32(&bc, 4, o2 + 1); /* o1 > o2: decreasing */
    assert_int_equal(info(&bc, "electra", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    set_u32(&bc, 4, o1);
    set_u32(&bc, 8, (uint32_t)bc.len + 1); /* past the end */
    assert_int_equal(info(&bc, "electra", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    set_u32(&bc, 8, (uint32_t)bc.len); /* at the end: empty blobs is fine */
    assert_int_equal(info(&bc, "electra", false, false, BM_SSZ_BLOCK_PRODUCE_V3), 0);
    set_u32(&bc, 4, 12 + 83); /* block region shorter than its fixed part */
    assert_int_equal(info(&bc, "fulu", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    set_u32(&bc, 4, 11); /* o1 < o0 */
    assert_int_equal(info(&bc, "fulu", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    drop(&bc);

    /* Signed: message offset */
    bytes_t sb = signed_of(&blk);
    const uint32_t bad_msg[] = {0, 4, 99, 101, 184};
    for (size_t i = 0; i < 5; i++) {
        set_u32(&sb, 0, bad_msg[i]);
        assert_int_equal(info(&sb, "phase0", false, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
        assert_int_equal(info(&sb, "phase0", false, false, BM_SSZ_BLOCK_SIGNED), BM_EINVAL);
    }
    set_u32(&sb, 0, 100);
    set_u32(&sb, 100 + 80, 85);
    assert_int_equal(info(&sb, "phase0", false, false, BM_SSZ_BLOCK_SIGNED), BM_EINVAL);
    set_u32(&sb, 100 + 80, 84);

    /* SignedBlockContents: the signed block must hold its message offset and the block */
    bytes_t sparts[3] = {sb, filler(0xc1, 48), filler(0xc2, 64)};
    bytes_t sbc = container(sparts, 3);
    assert_int_equal(info(&sbc, "deneb", false, false, BM_SSZ_BLOCK_PUBLISH), 0);
    set_u32(&sbc, 4, 12 + 100 + 83);
    assert_int_equal(info(&sbc, "deneb", false, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
    set_u32(&sbc, 4, 12 + 99);
    assert_int_equal(info(&sbc, "deneb", false, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
    /* A SignedBlockContents is not a SignedBeaconBlock (message offset 12, not 100). */
    drop(&sbc);
    sbc = container(sparts, 3);
    assert_int_equal(info(&sbc, "capella", false, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
    drop(&sbc);
    for (int i = 0; i < 3; i++)
        drop(&sparts[i]);
    drop(&parts[1]);
    drop(&parts[2]);
    drop(&blk);
}

static void test_bad_headers(void **state)
{
    (void)state;
    bytes_t blk = beacon_block(SLOT, PROPOSER, 100);
    bytes_t sb = signed_of(&blk);
    /* produceBlockV3 does not exist from gloas; V4 not before it. */
    assert_int_equal(info(&blk, "gloas", false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    assert_int_equal(info(&blk, "heze", true, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    assert_int_equal(info(&blk, "fulu", false, false, BM_SSZ_BLOCK_PRODUCE_V4), BM_EINVAL);
    /* Blinded blocks exist from bellatrix to fulu only. */
    assert_int_equal(info(&blk, "altair", true, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    assert_int_equal(info(&sb, "phase0", true, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
    assert_int_equal(info(&sb, "gloas", true, false, BM_SSZ_BLOCK_PUBLISH), BM_EINVAL);
    /* Bad fork names and kinds. */
    const char *bad[] = {"",        "fu lu", "deneb\n",
                         "électra", "0x01",  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(info(&blk, bad[i], false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    assert_int_equal(info(&blk, NULL, false, false, BM_SSZ_BLOCK_PRODUCE_V3), BM_EINVAL);
    assert_int_equal(info(&blk, "capella", false, false, 0), BM_EINVAL);
    assert_int_equal(info(&blk, "capella", false, false, 99), BM_EINVAL);
    /* Case does not matter in the header value. */
    assert_int_equal(info(&blk, "Capella", false, false, BM_SSZ_BLOCK_PRODUCE_V3), 0);
    assert_int_equal(info(&sb, "DENEB", true, false, BM_SSZ_BLOCK_PUBLISH), 0);
    drop(&blk);
    drop(&sb);
}

static void test_fork_parse(void **state)
{
    (void)state;
    const char *names[] = {"phase0",  "altair", "bellatrix", "capella", "deneb",
                           "electra", "fulu",   "gloas",     "heze"};
    for (int i = 0; i < 9; i++) {
        bm_fork_t f;
        assert_int_equal(bm_fork_parse(names[i], &f), 0);
        assert_int_equal(f, i);
        assert_string_equal(bm_fork_name(f), names[i]);
    }
    bm_fork_t f = BM_FORK_PHASE0;
    assert_int_equal(bm_fork_parse("Omega7", &f), 0);
    assert_int_equal(f, BM_FORK_FUTURE);
    assert_true(BM_FORK_FUTURE > BM_FORK_GLOAS && BM_FORK_HEZE > BM_FORK_GLOAS);
    assert_int_equal(bm_fork_parse("", &f), BM_EINVAL);
    assert_int_equal(bm_fork_parse("a-b", &f), BM_EINVAL);
    assert_string_equal(bm_fork_name((bm_fork_t)99), "?");
}

/* ---- fixed-size objects ----------------------------------------------------------- */

static bytes_t attestation_data_bytes(void)
{
    bytes_t b = {0};
    uint8_t r[32];
    put_u64(&b, 1000);
    put_u64(&b, 3);
    root_of(0x10, r);
    put(&b, r, 32);
    put_u64(&b, 30);
    root_of(0x30, r);
    put(&b, r, 32);
    put_u64(&b, 31);
    root_of(0x50, r);
    put(&b, r, 32);
    assert_int_equal(b.len, 128);
    return b;
}

static void check_attestation_data(const bm_ssz_attestation_data_t *d)
{
    uint8_t r[32];
    assert_true(d->slot == 1000 && d->index == 3);
    root_of(0x10, r);
    assert_memory_equal(d->beacon_block_root, r, 32);
    assert_true(d->source_epoch == 30);
    root_of(0x30, r);
    assert_memory_equal(d->source_root, r, 32);
    assert_true(d->target_epoch == 31);
    root_of(0x50, r);
    assert_memory_equal(d->target_root, r, 32);
}

static void test_attestation_data(void **state)
{
    (void)state;
    bytes_t b = attestation_data_bytes();
    /* documented positions */
    assert_true(get_u64(b.p + 0) == 1000 && get_u64(b.p + 8) == 3);
    assert_int_equal(b.p[16], 0x10);
    assert_true(get_u64(b.p + 48) == 30 && get_u64(b.p + 88) == 31);
    assert_int_equal(b.p[56], 0x30);
    assert_int_equal(b.p[96], 0x50);
    bm_ssz_attestation_data_t d;
    assert_int_equal(bm_ssz_attestation_data(b.p, b.len, &d), 0);
    check_attestation_data(&d);
    assert_int_equal(bm_ssz_attestation_data(b.p, 127, &d), BM_EINVAL);
    put_fill(&b, 0, 1);
    assert_int_equal(bm_ssz_attestation_data(b.p, b.len, &d), BM_EINVAL);
    assert_int_equal(bm_ssz_attestation_data(NULL, 128, &d), BM_EINVAL);
    drop(&b);
}

static void test_payload_attestation_data(void **state)
{
    (void)state;
    bytes_t b = {0};
    uint8_t r[32];
    root_of(0x77, r);
    put(&b, r, 32);
    put_u64(&b, 99);
    uint8_t flags[2] = {1, 0};
    put(&b, flags, 2);
    assert_int_equal(b.len, 42);
    bm_ssz_payload_attestation_data_t d;
    assert_int_equal(bm_ssz_payload_attestation_data(b.p, b.len, &d), 0);
    assert_memory_equal(d.beacon_block_root, r, 32);
    assert_true(d.slot == 99 && d.payload_present && !d.blob_data_available);
    b.p[40] = 0;
    b.p[41] = 1;
    assert_int_equal(bm_ssz_payload_attestation_data(b.p, b.len, &d), 0);
    assert_true(!d.payload_present && d.blob_data_available);
    b.p[41] = 2; /* not an SSZ boolean */
    assert_int_equal(bm_ssz_payload_attestation_data(b.p, b.len, &d), BM_EINVAL);
    b.p[41] = 1;
    assert_int_equal(bm_ssz_payload_attestation_data(b.p, 41, &d), BM_EINVAL);
    put_fill(&b, 0, 1);
    assert_int_equal(bm_ssz_payload_attestation_data(b.p, b.len, &d), BM_EINVAL);
    drop(&b);
}

static bytes_t attestation(bool electra, const uint8_t *bits, size_t nbits_bytes)
{
    bytes_t b = {0}, ad = attestation_data_bytes();
    put_u32(&b, electra ? 236 : 228);
    put(&b, ad.p, ad.len);
    put_fill(&b, 0x99, 96);
    if (electra)
        put_u64(&b, 0x8000000000000005ULL);
    put(&b, bits, nbits_bytes);
    drop(&ad);
    return b;
}

static void test_attestation_bits(void **state)
{
    (void)state;
    bm_ssz_attestation_info_t a;
    /* 0x0f01: four participants, delimiter at bit 8 of the Bitlist -> length 8 */
    const uint8_t bits1[] = {0x0f, 0x01};
    bytes_t e = attestation(true, bits1, 2);
    assert_int_equal(bm_ssz_u32(e.p), 236);
    assert_int_equal(bm_ssz_attestation_info(e.p, e.len, "electra", &a), 0);
    assert_int_equal(a.bits_set, 4);
    assert_int_equal(a.bits_len, 8);
    assert_true(a.committee_bits == 0x8000000000000005ULL);
    check_attestation_data(&a.data);
    assert_int_equal(bm_ssz_attestation_info(e.p, e.len, "gloas", &a), 0);
    /* the same bytes under a pre-electra fork: offset 236 is wrong there */
    assert_int_equal(bm_ssz_attestation_info(e.p, e.len, "deneb", &a), BM_EINVAL);
    drop(&e);

    /* 0xff03: nine participants, delimiter bit 1 of the last byte -> length 9 */
    const uint8_t bits2[] = {0xff, 0x03};
    bytes_t p = attestation(false, bits2, 2);
    assert_int_equal(bm_ssz_u32(p.p), 228);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "phase0", &a), 0);
    assert_int_equal(a.bits_set, 9);
    assert_int_equal(a.bits_len, 9);
    assert_true(a.committee_bits == 0);
    check_attestation_data(&a.data);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "deneb", &a), 0);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "electra", &a), BM_EINVAL);
    drop(&p);

    /* only the delimiter: zero participants */
    const uint8_t bits3[] = {0x01};
    p = attestation(false, bits3, 1);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "altair", &a), 0);
    assert_int_equal(a.bits_set, 0);
    assert_int_equal(a.bits_len, 0);
    drop(&p);

    /* no delimiter (last byte zero), or no Bitlist bytes at all */
    const uint8_t bits4[] = {0xff, 0x00};
    p = attestation(false, bits4, 2);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "altair", &a), BM_EINVAL);
    drop(&p);
    p = attestation(false, bits4, 0);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "altair", &a), BM_EINVAL);
    drop(&p);

    /* the Bitlist limit: 2048 bits before electra */
    uint8_t big[258];
    memset(big, 0xff, sizeof big);
    big[256] = 0x01; /* 2048 bits, all set */
    p = attestation(false, big, 257);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "capella", &a), 0);
    assert_int_equal(a.bits_set, 2048);
    assert_int_equal(a.bits_len, 2048);
    drop(&p);
    big[256] = 0x03; /* 2049 bits */
    p = attestation(false, big, 257);
    assert_int_equal(bm_ssz_attestation_info(p.p, p.len, "capella", &a), BM_EINVAL);
    drop(&p);
    /* ... which electra allows */
    e = attestation(true, big, 257);
    assert_int_equal(bm_ssz_attestation_info(e.p, e.len, "electra", &a), 0);
    assert_int_equal(a.bits_set, 2049);
    drop(&e);

    /* truncated fixed part and bad fork */
    e = attestation(true, bits1, 2);
    for (size_t n = 0; n < 237; n++)
        assert_int_equal(bm_ssz_attestation_info(e.p, n, "electra", &a), BM_EINVAL);
    assert_int_equal(bm_ssz_attestation_info(e.p, e.len, "", &a), BM_EINVAL);
    drop(&e);
}

static void test_sync_contribution(void **state)
{
    (void)state;
    bytes_t b = {0};
    uint8_t r[32];
    root_of(0x21, r);
    put_u64(&b, 555);
    put(&b, r, 32);
    put_u64(&b, 2);
    put_fill(&b, 0xff, 15);
    put_fill(&b, 0x81, 1);
    put_fill(&b, 0x42, 96);
    assert_int_equal(b.len, 160);
    bm_ssz_sync_contribution_t c;
    assert_int_equal(bm_ssz_sync_contribution(b.p, b.len, &c), 0);
    assert_true(c.slot == 555 && c.subcommittee_index == 2);
    assert_memory_equal(c.beacon_block_root, r, 32);
    assert_int_equal(c.bits_set, 15 * 8 + 2); /* a Bitvector: every bit counts */
    memset(b.p + 48, 0, 16);
    assert_int_equal(bm_ssz_sync_contribution(b.p, b.len, &c), 0);
    assert_int_equal(c.bits_set, 0);
    assert_int_equal(bm_ssz_sync_contribution(b.p, 159, &c), BM_EINVAL);
    put_fill(&b, 0, 1);
    assert_int_equal(bm_ssz_sync_contribution(b.p, b.len, &c), BM_EINVAL);
    drop(&b);
}

/* ---- envelopes -------------------------------------------------------------------- */

static bytes_t envelope(size_t payload_len, size_t requests_len)
{
    bytes_t b = {0};
    uint8_t r[32];
    put_u32(&b, 80);
    put_u32(&b, (uint32_t)(80 + payload_len));
    put_u64(&b, 0xfffffffffffffff0ULL);
    root_of(0x61, r);
    put(&b, r, 32);
    root_of(0x81, r);
    put(&b, r, 32);
    put_fill(&b, 0xd0, payload_len);
    put_fill(&b, 0xd1, requests_len);
    return b;
}

static void check_envelope_row(const bytes_t *b, int kind, size_t builder_at, size_t min_ok)
{
    uint8_t root[32], parent[32];
    root_of(0x61, root);
    root_of(0x81, parent);
    assert_true(get_u64(b->p + builder_at) == 0xfffffffffffffff0ULL);
    assert_memory_equal(b->p + builder_at + 8, root, 32);
    assert_memory_equal(b->p + builder_at + 40, parent, 32);
    bm_ssz_envelope_info_t e;
    assert_int_equal(bm_ssz_envelope_info(b->p, b->len, kind, &e), 0);
    assert_true(e.builder_index == 0xfffffffffffffff0ULL);
    assert_memory_equal(e.beacon_block_root, root, 32);
    assert_memory_equal(e.parent_beacon_block_root, parent, 32);
    for (size_t n = 0; n < b->len; n++) {
        uint8_t *t = malloc(n ? n : 1);
        memcpy(t, b->p, n);
        int rc = bm_ssz_envelope_info(t, n, kind, &e);
        assert_int_equal(rc, n < min_ok ? BM_EINVAL : 0);
        free(t);
    }
}

static void test_envelope_rows(void **state)
{
    (void)state;
    bytes_t env = envelope(40, 12);
    /* ExecutionPayloadEnvelope: builder_index 8..16, roots 16..48 and 48..80 */
    check_envelope_row(&env, BM_SSZ_ENVELOPE, 8, 80 + 40);
    /* SignedExecutionPayloadEnvelope: 108..116, 116..148, 148..180 */
    bytes_t se = signed_of(&env);
    check_envelope_row(&se, BM_SSZ_ENVELOPE_SIGNED, 108, 100 + 80 + 40);
    /* SignedExecutionPayloadEnvelopeContents: 120..128, 128..160, 160..192 */
    bytes_t parts[3] = {se, filler(0xc1, 48), filler(0xc2, 64)};
    bytes_t sec = container(parts, 3);
    check_envelope_row(&sec, BM_SSZ_ENVELOPE_SIGNED_CONTENTS, 120, bm_ssz_u32(sec.p + 8));
    /* inside a Gloas BlockContents: u32@4 + 8 */
    bytes_t bparts[4] = {beacon_block(SLOT, PROPOSER, 100), env, filler(0xc1, 48),
                         filler(0xc2, 64)};
    bytes_t bc = container(bparts, 4);
    size_t at = bm_ssz_u32(bc.p + 4);
    check_envelope_row(&bc, BM_SSZ_ENVELOPE_IN_BLOCK_CONTENTS, at + 8, bm_ssz_u32(bc.p + 12));

    /* bad offsets inside the envelope */
    bm_ssz_envelope_info_t e;
    set_u32(&env, 0, 81);
    assert_int_equal(bm_ssz_envelope_info(env.p, env.len, BM_SSZ_ENVELOPE, &e), BM_EINVAL);
    set_u32(&env, 0, 80);
    set_u32(&env, 4, 79); /* execution_requests before payload */
    assert_int_equal(bm_ssz_envelope_info(env.p, env.len, BM_SSZ_ENVELOPE, &e), BM_EINVAL);
    set_u32(&env, 4, (uint32_t)env.len + 1);
    assert_int_equal(bm_ssz_envelope_info(env.p, env.len, BM_SSZ_ENVELOPE, &e), BM_EINVAL);
    set_u32(&env, 4, (uint32_t)env.len);
    assert_int_equal(bm_ssz_envelope_info(env.p, env.len, BM_SSZ_ENVELOPE, &e), 0);
    /* the envelope region inside BlockContents is bounded by the next offset */
    set_u32(&bc, 8, (uint32_t)at + 79);
    assert_int_equal(bm_ssz_envelope_info(bc.p, bc.len, BM_SSZ_ENVELOPE_IN_BLOCK_CONTENTS, &e),
                     BM_EINVAL);
    assert_int_equal(bm_ssz_envelope_info(bc.p, bc.len, 0, &e), BM_EINVAL);
    assert_int_equal(bm_ssz_envelope_info(NULL, 0, BM_SSZ_ENVELOPE, &e), BM_EINVAL);

    drop(&env);
    drop(&sec);
    drop(&bc);
    for (int i = 0; i < 3; i++)
        drop(&parts[i]);
    drop(&bparts[0]);
    drop(&bparts[2]);
    drop(&bparts[3]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_beacon_block),
        cmocka_unit_test(test_row_blinded_beacon_block),
        cmocka_unit_test(test_row_block_contents),
        cmocka_unit_test(test_row_block_contents_gloas),
        cmocka_unit_test(test_row_signed_beacon_block),
        cmocka_unit_test(test_row_signed_block_contents),
        cmocka_unit_test(test_slot_looks_like_offset),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_fork_parse),
        cmocka_unit_test(test_attestation_data),
        cmocka_unit_test(test_payload_attestation_data),
        cmocka_unit_test(test_attestation_bits),
        cmocka_unit_test(test_sync_contribution),
        cmocka_unit_test(test_envelope_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
