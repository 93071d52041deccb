/* SPDX-License-Identifier: MIT */
/*
 * err: descriptions of BM_E* codes and the translation of libuv codes, which every
 * module that touches sockets needs.
 */
#include "base/err.h"

#include <uv.h>

const char *bm_strerror(int err)
{
    switch (err) {
    case BM_OK:
        return "success";
    case BM_EINVAL:
        return "invalid argument or malformed input";
    case BM_ENOMEM:
        return "out of memory";
    case BM_ETOOBIG:
        return "size limit exceeded";
    case BM_ETIMEDOUT:
        return "timed out";
    case BM_ECONNREFUSED:
        return "connection failed";
    case BM_ECONNRESET:
        return "connection closed by peer";
    case BM_ECANCELED:
        return "cancelled";
    case BM_EPROTO:
        return "protocol error";
    case BM_EIO:
        return "I/O error";
    case BM_ENOTFOUND:
        return "not found";
    case BM_ECLOSED:
        return "closed";
    case BM_EUNAVAIL:
        return "unavailable";
    case BM_ETLS:
        return "TLS error";
    default:
        return "unknown error";
    }
}

int bm_err_from_uv(int uv_err)
{
    switch (uv_err) {
    case 0:
        return BM_OK;
    case UV_ENOMEM:
        return BM_ENOMEM;
    case UV_ETIMEDOUT:
        return BM_ETIMEDOUT;
    case UV_ECONNREFUSED:
    case UV_ENETUNREACH:
    case UV_EHOSTUNREACH:
    case UV_EADDRNOTAVAIL:
    case UV_EAI_NONAME:
    case UV_EAI_AGAIN:
        return BM_ECONNREFUSED;
    case UV_ECONNRESET:
    case UV_EPIPE:
    case UV_EOF:
    case UV_ECONNABORTED:
        return BM_ECONNRESET;
    case UV_ECANCELED:
        return BM_ECANCELED;
    case UV_EINVAL:
        return BM_EINVAL;
    default:
        return BM_EIO;
    }
}
