/* SPDX-License-Identifier: MIT */
/*
 * ui: the web dashboard's files (ui/ in the source tree: plain HTML, CSS and JavaScript,
 * no framework, nothing fetched from elsewhere), compiled into the binary at build time
 * (cmake/embed_ui.cmake writes them as C arrays), served under /ui/. The page itself polls
 * /beaconmux/v1/dashboard (observe.h) once a second.
 *
 * Answers carry Cache-Control: no-cache (a new binary brings its page at once), a
 * Content-Security-Policy that allows this origin only, and X-Content-Type-Options. Every
 * link of the page is relative, so that it works under a prefix (a network's /{id}/ui/).
 */
#ifndef BM_UI_H
#define BM_UI_H

#include <stddef.h>

#include "http/router.h"

/** One embedded file. */
typedef struct bm_ui_file {
    const char *name; /* "index.html" */
    const unsigned char *data;
    size_t len;
} bm_ui_file_t;

/** The embedded files (generated at build time), and how many. */
extern const bm_ui_file_t bm_ui_files[];
extern const size_t bm_ui_n_files;

/** The file named name[0..len), or NULL. */
const bm_ui_file_t *bm_ui_find(const char *name, size_t len);

/** The Content-Type of a file by its extension ("application/octet-stream" when unknown). */
const char *bm_ui_content_type(const char *name);

/** Registers GET /ui (a redirect to /ui/), /ui/ (index.html) and /ui/{file}. */
int bm_ui_register(bm_router_t *r);

#endif /* BM_UI_H */
