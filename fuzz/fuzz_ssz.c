/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for ssz. The first byte selects the headers: fork (low 4 bits, over
 * every known fork plus "heze" and an unknown future name), block kind (next 2 bits),
 * blinded and included (top bits). The rest is the body, handed to every reader. The body
 * is copied into an allocation of exactly its size so that ASan flags any read past the
 * end. Properties: each reader gives the same result twice (deterministic, no hidden
 * state), and what it returns is consistent with the bytes: the block it reports lies
 * inside the body and holds the slot and parent root it returned; a Bitlist never has
 * more set bits than its length.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ssz.h"

static const char *const forks[] = {"phase0", "altair",  "bellatrix", "capella",
                                    "deneb",  "electra", "fulu",      "gloas",
                                    "heze",   "zeta",    "",          "bad fork"};

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    memcpy(buf, data + 1, len);
    const uint8_t *body = len ? buf : NULL;
    const char *fork = forks[(sel & 15) % (sizeof forks / sizeof *forks)];
    int kind = 1 + ((sel >> 4) & 3);
    bool blinded = sel & 0x40, included = sel & 0x80;

    bm_ssz_block_info_t b1, b2;
    memset(&b1, 0, sizeof b1);
    memset(&b2, 0, sizeof b2);
    int r1 = bm_ssz_block_info(body, len, fork, blinded, included, kind, &b1);
    int r2 = bm_ssz_block_info(body, len, fork, blinded, included, kind, &b2);
    CHECK(r1 == r2 && memcmp(&b1, &b2, sizeof b1) == 0);
    if (r1 == 0) {
        CHECK(b1.block_len >= 84 && b1.block_offset + b1.block_len <= len);
        CHECK(b1.slot == bm_ssz_u64(buf + b1.block_offset));
        CHECK(b1.proposer_index == bm_ssz_u64(buf + b1.block_offset + 8));
        CHECK(memcmp(b1.parent_root, buf + b1.block_offset + 16, 32) == 0);
        CHECK(bm_ssz_u32(buf + b1.block_offset + 80) == 84);
    }

    bm_ssz_attestation_data_t a1, a2;
    memset(&a1, 0, sizeof a1);
    memset(&a2, 0, sizeof a2);
    r1 = bm_ssz_attestation_data(body, len, &a1);
    r2 = bm_ssz_attestation_data(body, len, &a2);
    CHECK(r1 == r2 && memcmp(&a1, &a2, sizeof a1) == 0);
    CHECK(r1 != 0 || len == BM_SSZ_ATTESTATION_DATA_LEN);

    bm_ssz_payload_attestation_data_t p1, p2;
    memset(&p1, 0, sizeof p1);
    memset(&p2, 0, sizeof p2);
    r1 = bm_ssz_payload_attestation_data(body, len, &p1);
    r2 = bm_ssz_payload_attestation_data(body, len, &p2);
    CHECK(r1 == r2 && memcmp(&p1, &p2, sizeof p1) == 0);

    bm_ssz_attestation_info_t i1, i2;
    memset(&i1, 0, sizeof i1);
    memset(&i2, 0, sizeof i2);
    r1 = bm_ssz_attestation_info(body, len, fork, &i1);
    r2 = bm_ssz_attestation_info(body, len, fork, &i2);
    CHECK(r1 == r2 && memcmp(&i1, &i2, sizeof i1) == 0);
    if (r1 == 0)
        CHECK(i1.bits_set <= i1.bits_len && i1.bits_len <= 2048u * 64u);

    bm_ssz_sync_contribution_t s1, s2;
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    r1 = bm_ssz_sync_contribution(body, len, &s1);
    r2 = bm_ssz_sync_contribution(body, len, &s2);
    CHECK(r1 == r2 && memcmp(&s1, &s2, sizeof s1) == 0);
    if (r1 == 0)
        CHECK(s1.bits_set <= 128);

    bm_ssz_envelope_info_t e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    r1 = bm_ssz_envelope_info(body, len, kind, &e1);
    r2 = bm_ssz_envelope_info(body, len, kind, &e2);
    CHECK(r1 == r2 && memcmp(&e1, &e2, sizeof e1) == 0);

    free(buf);
    return 0;
}
