/* SPDX-License-Identifier: MIT */
/*
 * ui: lookup and serving of the embedded dashboard files (see ui.h). The files are static
 * arrays: every answer wraps one without a copy.
 */
#include "observe/ui.h"

#include <string.h>

#include "base/buf.h"
#include "base/hdrs.h"

const bm_ui_file_t *bm_ui_find(const char *name, size_t len)
{
    for (size_t i = 0; i < bm_ui_n_files; i++)
        if (strlen(bm_ui_files[i].name) == len && memcmp(bm_ui_files[i].name, name, len) == 0)
            return &bm_ui_files[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const char *bm_ui_content_type(const char *name)
{
    if (ends_with(name, ".html"))
        return "text/html; charset=utf-8";
    if (ends_with(name, ".js"))
        return "text/javascript; charset=utf-8";
    if (ends_with(name, ".css"))
        return "text/css; charset=utf-8";
    if (ends_with(name, ".svg"))
        return "image/svg+xml";
    if (ends_with(name, ".png"))
        return "image/png";
    return "application/octet-stream";
}

static void send_file(bm_req_t *req, const bm_ui_file_t *f)
{
    bm_buf_t *b = bm_buf_copy(f->data, f->len);
    if (!b) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", bm_ui_content_type(f->name));
    bm_hdrs_add_z(&h, "Cache-Control", "no-cache");
    bm_hdrs_add_z(&h, "X-Content-Type-Options", "nosniff");
    bm_hdrs_add_z(&h, "Content-Security-Policy",
                  "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    bm_resp_send(req, 200, NULL, b, &h);
    bm_hdrs_dispose(&h);
    bm_buf_unref(b);
}

static void route_root(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    (void)ud;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Location", "ui/"); /* relative: under a network's prefix too */
    bm_resp_send(req, 301, NULL, NULL, &h);
    bm_hdrs_dispose(&h);
}

static void route_index(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    (void)ud;
    const bm_ui_file_t *f = bm_ui_find("index.html", 10);
    if (f)
        send_file(req, f);
    else
        bm_resp_error(req, 404, "no dashboard in this build");
}

static void route_file(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)ud;
    const bm_ui_file_t *f = p->n ? bm_ui_find(p->p[0].value, p->p[0].len) : NULL;
    if (f)
        send_file(req, f);
    else
        bm_resp_error(req, 404, "no such file in the dashboard");
}

int bm_ui_register(bm_router_t *r)
{
    int rc = bm_router_add_only(r, "GET", "/ui", route_root, NULL);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/ui/", route_index, NULL);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/ui/{file}", route_file, NULL);
    return rc;
}
