/* SPDX-License-Identifier: MIT */
/*
 * client_thread: a test's client in a thread of its own, beside a server on the test's loop
 * (test_server, test_tls). The client uses plain blocking sockets; it and the loop wait for
 * each other only on a semaphore (ct_wait, bounded) and on the sockets, never on sleeps.
 * A failed CT_CHECK in the client is recorded as text and ends the client; the main thread
 * asserts on it after the join (cmocka's asserts belong to the main thread).
 *
 * Use: ct_start from the loop's thread, then run the loop until `done` (or a bound); ct_join
 * lets a client still waiting go, joins it and asserts it ended cleanly; ct_close before
 * the loop is closed.
 */
#ifndef BM_TEST_CLIENT_THREAD_H
#define BM_TEST_CLIENT_THREAD_H

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <uv.h>

typedef struct client_thread {
    uv_async_t done_async; /* the thread -> the loop: the client returned */
    pthread_t th;
    sem_t sem;     /* the loop -> the client: "the point the client waits for is reached" */
    bool done;     /* set on the loop once the client returned */
    char err[512]; /* the first failed CT_CHECK, "" when none */
    void (*fn)(void *arg);
    void *arg;
} client_thread_t;

static inline void ct_on_done(uv_async_t *a)
{
    ((client_thread_t *)a->data)->done = true;
}

static inline void *ct_main(void *p)
{
    client_thread_t *ct = p;
    ct->fn(ct->arg);
    uv_async_send(&ct->done_async);
    return NULL;
}

/* Starts fn(arg) in a new thread; `loop` hears when it returns. */
static inline void ct_start(client_thread_t *ct, uv_loop_t *loop, void (*fn)(void *), void *arg)
{
    ct->done = false;
    ct->err[0] = '\0';
    ct->fn = fn;
    ct->arg = arg;
    uv_async_init(loop, &ct->done_async, ct_on_done);
    ct->done_async.data = ct;
    sem_init(&ct->sem, 0, 0);
    assert_int_equal(pthread_create(&ct->th, NULL, ct_main, ct), 0);
}

/* In the client: records the first failed expectation. */
static inline void ct_fail(client_thread_t *ct, int line, const char *what)
{
    if (!ct->err[0])
        snprintf(ct->err, sizeof ct->err, "client line %d: %s", line, what);
}

/* In the client: record the failed expectation and return from the client function. */
#define CT_CHECK(ct, cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ct_fail((ct), __LINE__, #cond);                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* In the client: waits for the loop to post the semaphore, at most bound_ms. */
static inline bool ct_wait(client_thread_t *ct, unsigned bound_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += bound_ms / 1000;
    while (sem_timedwait(&ct->sem, &ts) != 0)
        if (errno != EINTR)
            return false;
    return true;
}

/* After the loop ran until `done` or its bound: lets a client still waiting go, joins it,
 * and asserts that it returned in time and met every expectation. */
static inline void ct_join(client_thread_t *ct)
{
    bool in_time = ct->done;
    if (!in_time)
        sem_post(&ct->sem);
    pthread_join(ct->th, NULL);
    assert_true(in_time);
    assert_string_equal(ct->err, "");
}

/* Closes the loop's side (run the loop once more to finish the close). */
static inline void ct_close(client_thread_t *ct)
{
    uv_close((uv_handle_t *)&ct->done_async, NULL);
    sem_destroy(&ct->sem);
}

#endif /* BM_TEST_CLIENT_THREAD_H */
