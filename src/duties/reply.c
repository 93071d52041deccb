/* SPDX-License-Identifier: MIT */
/* reply: a race's answer to the client, fixed length, the body written without a copy. */
#include "duties/reply.h"

void bm_reply_answer(bm_req_t *req, const bm_race_answer_t *a)
{
    int status = a->status >= 200 && a->status <= 599 ? a->status : 502;
    bm_resp_send(req, status, NULL, a->body, a->headers);
}
