/* SPDX-License-Identifier: MIT */
/*
 * test_sharing: what a shared producer record says, written by one instance and read by
 * another: the upstream id and the block's state root (or none), and what is refused; a
 * served duty read's record is handed to Redis only after the turn its answer is written in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "app/sharing.h"
#include "base/buf.h"
#include "base/err.h"
#include "fake_node.h"

static void test_producer_record_round_trip(void **state)
{
    (void)state;
    uint8_t root[32], back[32];
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(i * 7 + 1);
    char id[128];
    bool has;
    bm_str_t v = BM_STR_INIT;
    bm_sharing_producer_format(&v, "lighthouse-1", root);
    assert_int_equal(bm_sharing_producer_parse(bm_str_data(&v), bm_str_len(&v), id, back, &has), 0);
    assert_string_equal(id, "lighthouse-1");
    assert_true(has);
    assert_memory_equal(back, root, 32);
    bm_str_dispose(&v);
    bm_sharing_producer_format(&v, "n2", NULL);
    assert_int_equal(bm_sharing_producer_parse(bm_str_data(&v), bm_str_len(&v), id, back, &has), 0);
    assert_string_equal(id, "n2");
    assert_false(has);
    bm_str_dispose(&v);
    const char *bad[] = {
        "n1",    " 0x00", "n1 0x1234",
        "n1 xx", "n1 --", "n1 0xzz00000000000000000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(bm_sharing_producer_parse(bad[i], strlen(bad[i]), id, back, &has),
                         BM_EINVAL);
}

/* The network's modules a sharing connects to, on a fake mux's manual clock, with a Redis
 * that cannot be reached (nothing listens on port 1): every record stays local, counted. */
typedef struct sfx {
    fake_mux_t *m;
    bm_hint_t *hint;
    bm_replay_t *replay;
    bm_produce_t *produce;
    bm_broadcast_t *bcast;
    bm_readpath_t *readpath;
    bm_observe_t *observe;
    bm_sharing_t *s;
} sfx_t;

static void sfx_stop(void *ud)
{
    sfx_t *x = ud;
    bm_sharing_free(x->s);
    bm_observe_free(x->observe);
    bm_replay_stop(x->replay);
    bm_broadcast_stop(x->bcast);
}

static void sfx_free(void *ud)
{
    sfx_t *x = ud;
    bm_readpath_free(x->readpath);
    bm_broadcast_free(x->bcast);
    bm_replay_free(x->replay);
    bm_produce_free(x->produce);
    bm_hint_free(x->hint);
}

static void sfx_init(sfx_t *x)
{
    memset(x, 0, sizeof *x);
    x->m = fake_mux_new_manual(false);
    fake_mux_t *m = x->m;
    assert_non_null(bm_pool_add(m->pool, "n0", "http://127.0.0.1:1", NULL));
    bm_replay_opts_t ro;
    bm_replay_opts_default(&ro);
    x->replay = bm_replay_new(m->clock, m->up, m->pool, NULL, &ro);
    x->hint = bm_hint_new(NULL);
    bm_produce_opts_t po;
    bm_produce_opts_default(&po);
    x->produce = bm_produce_new(m->clock, m->eng, m->pool, x->hint, &po);
    bm_broadcast_opts_t bo;
    bm_broadcast_opts_default(&bo);
    x->bcast = bm_broadcast_new(m->clock, m->eng, m->pool, x->replay, &bo);
    bm_readpath_opts_t rpo;
    bm_readpath_opts_default(&rpo);
    x->readpath = bm_readpath_new(&m->loop, m->up, m->pool, NULL, &rpo);
    bm_observe_sources_t src = {.pool = m->pool};
    x->observe = bm_observe_new(&src, NULL);
    assert_true(x->replay && x->hint && x->produce && x->bcast && x->readpath && x->observe);
    bm_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.state.redis.url = "redis://127.0.0.1:1/0";
    cfg.state.redis.timeout_ms = 50;
    x->s = bm_sharing_new(&m->loop, m->clock, &cfg, NULL, m->pool, x->replay, x->produce, x->bcast,
                          x->readpath);
    assert_non_null(x->s);
    bm_sharing_set_observe(x->s, x->observe);
    m->module = x;
    m->module_stop = sfx_stop;
    m->module_free = sfx_free;
}

/* The status section's "journal_kept": served reads formatted for Redis and kept local. */
static long journal_kept(sfx_t *x)
{
    bm_str_t out = BM_STR_INIT;
    bm_sharing_status_json(&out, x->s);
    const char *p = strstr(bm_str_data(&out), "\"journal_kept\":");
    assert_non_null(p);
    long n = strtol(p + strlen("\"journal_kept\":"), NULL, 10);
    bm_str_dispose(&out);
    return n;
}

/* A duty race completes mostly in the loop turn whose end writes its answer: its record is
 * neither formatted nor handed to Redis in that turn, only from the next (1 ms later). */
static void test_served_record_waits_for_the_answer(void **state)
{
    (void)state;
    sfx_t x;
    sfx_init(&x);
    bm_served_t rec;
    memset(&rec, 0, sizeof rec);
    rec.slot = 77;
    rec.requests = 1;
    rec.node = rec.first_node = rec.served.index = rec.first.index = -1;
    bm_observe_served(&rec, x.observe); /* what a race's completion calls */
    bm_observe_served(&rec, x.observe);
    assert_int_equal(journal_kept(&x), 0); /* nothing done for Redis in the answer's turn */
    fake_mux_advance(x.m, 1);
    assert_int_equal(journal_kept(&x), 2); /* then both, in order, kept: Redis is away */
    fake_mux_free(x.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer_record_round_trip),
        cmocka_unit_test(test_served_record_waits_for_the_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
