/* SPDX-License-Identifier: MIT */
/*
 * sse_plain: src/http/sse.c compiled a second time under other names (bm_sse_plain_*), for
 * fuzz_sse's one-byte-at-a-time pass. In the fuzz preset this copy is built without
 * libFuzzer's coverage instrumentation but with ASan and UBSan (CMakeLists.txt): feeding
 * 2 KiB one byte per call spent three quarters of the harness's time tracing comparisons.
 * The whole and cut passes still run the instrumented parser, and what guides the fuzzer is
 * theirs: the parser's branches do not depend on where a chunk ends, except a chunk that
 * ends inside the BOM, which the cut passes reach when a cut falls at 1 or 2. The code is
 * the very same file, so the property still judges the product's parser byte by byte.
 */
#define bm_sse_new bm_sse_plain_new
#define bm_sse_free bm_sse_plain_free
#define bm_sse_feed bm_sse_plain_feed
#define bm_sse_reset bm_sse_plain_reset
#define bm_sse_retry_ms bm_sse_plain_retry_ms
#define bm_sse_stats bm_sse_plain_stats
#include "../src/http/sse.c"
