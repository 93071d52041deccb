/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the replay state's body parser (bm_replay_feed): the bodies of
 * prepare_beacon_proposer, register_validator, proposer_preferences and the two subnet
 * subscription endpoints, JSON or SSZ, as a validator client (or anything pretending to be
 * one) sends them. The first byte selects the kind (low 3 bits), SSZ or JSON (bit 3) and the
 * Eth-Consensus-Version header (bits 4-5: gloas, heze, none, an overlong name); the rest
 * is the body, copied into an allocation of exactly its size.
 *
 * Properties: feeding never crashes and reports no fewer entries than it keeps; the fast
 * scanner and json-c agree (same count, same state) on every input; the state it leaves,
 * rendered as the JSON a replay would send (bm_replay_dump), is a fixed point: fed into a
 * fresh state it renders the very same text (what is replayed is exactly what was kept,
 * and the replayed JSON parses back into the same entries).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "base/clock.h"
#include "base/log.h"
#include "cluster/pool.h"
#include "duties/replay.h"
#include "http/upstream.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static uv_loop_t loop;
static bm_clock_t *clock_;
static bm_upstream_t *up;
static bm_pool_t *pool;

static bm_replay_t *fresh(bool json_c_only)
{
    if (!up) {
        bm_log_setup(BM_LOG_OFF, BM_LOG_TEXT, NULL);
        uv_loop_init(&loop);
        bm_upstream_opts_t o;
        bm_upstream_opts_default(&o);
        up = bm_upstream_new(&loop, &o);
        pool = bm_pool_new();
        clock_ = bm_clock_real_new(&loop);
        CHECK(up && pool && clock_);
    }
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.json_c_only = json_c_only;
    bm_replay_t *rp = bm_replay_new(clock_, up, pool, NULL, &o);
    CHECK(rp);
    return rp;
}

static void done(bm_replay_t *rp)
{
    bm_replay_stop(rp);
    uv_run(&loop, UV_RUN_NOWAIT);
    bm_replay_free(rp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const forks[] = {"gloas", "heze", NULL,
                                        "a-fork-name-far-longer-than-thirty-two-characters"};
    uint8_t sel = data[0];
    bm_replay_kind_t kind = (bm_replay_kind_t)((sel & 7) % BM_REPLAY_KIND_COUNT);
    bool ssz = sel & 8;
    const char *fork = forks[(sel >> 4) & 3];
    bm_buf_t *body = bm_buf_copy(data + 1, size - 1);
    CHECK(body);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", ssz ? "application/octet-stream" : "application/json");
    if (fork)
        bm_hdrs_add_z(&h, "Eth-Consensus-Version", fork);

    bm_replay_t *a = fresh(false);
    int n = bm_replay_feed(a, kind, &h, body, 1000);
    CHECK(n < 0 || (size_t)n >= bm_replay_count(a, kind));
    bm_str_t d1 = BM_STR_INIT;
    CHECK(bm_replay_dump(a, kind, 1000, &d1) == 0);
    CHECK(bm_str_len(&d1) >= 2);

    /* json-c reads it the same */
    bm_replay_t *c = fresh(true);
    int nc = bm_replay_feed(c, kind, &h, body, 1000);
    CHECK(nc == n);
    bm_str_t dc = BM_STR_INIT;
    CHECK(bm_replay_dump(c, kind, 1000, &dc) == 0);
    CHECK(bm_str_len(&d1) == bm_str_len(&dc) &&
          memcmp(bm_str_data(&d1), bm_str_data(&dc), bm_str_len(&d1)) == 0);
    bm_str_dispose(&dc);
    done(c);

    /* the replayed form parses back into the same state */
    bm_replay_t *b = fresh(false);
    bm_buf_t *again = bm_buf_copy(bm_str_data(&d1), bm_str_len(&d1));
    bm_hdrs_set_z(&h, "Content-Type", "application/json");
    if (!fork || strlen(fork) > 32)
        bm_hdrs_set_z(&h, "Eth-Consensus-Version", "gloas");
    int m = bm_replay_feed(b, kind, &h, again, 1000);
    CHECK(m == (int)bm_replay_count(a, kind));
    bm_str_t d2 = BM_STR_INIT;
    CHECK(bm_replay_dump(b, kind, 1000, &d2) == 0);
    CHECK(bm_str_len(&d1) == bm_str_len(&d2) &&
          memcmp(bm_str_data(&d1), bm_str_data(&d2), bm_str_len(&d1)) == 0);

    bm_str_dispose(&d1);
    bm_str_dispose(&d2);
    bm_buf_unref(again);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    done(a);
    done(b);
    return 0;
}
