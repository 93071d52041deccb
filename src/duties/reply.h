/* SPDX-License-Identifier: MIT */
/*
 * reply: how a policy answers its client with what a race decided. The race engine knows
 * nothing of clients (it sits below the router); the policies above it all answer the same
 * way, so the way lives here once.
 */
#ifndef BM_REPLY_H
#define BM_REPLY_H

#include "duties/race.h"
#include "http/server.h"

/**
 * Answers `req` with the race answer `a`: its status, headers (hop-by-hop fields already
 * removed by the engine) and body, as they are; a status a client cannot be given (outside
 * 200..599) becomes 502. Ends the request.
 */
void bm_reply_answer(bm_req_t *req, const bm_race_answer_t *a);

#endif /* BM_REPLY_H */
