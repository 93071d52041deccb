#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Coalescing: 1,000 concurrent identical reads through beaconmux reach the nodes once.

beaconsim (3 nodes, each answering 500 ms late) behind beaconmux (release build, hedges off);
once every
node is ready, 1,000 connections send GET /eth/v2/beacon/blocks/genesis at once; the sim's
request counters say how many reached a node. Then the same again with
`Cache-Control: no-cache` on 100 connections (no coalescing, no cache): the baseline."""
import asyncio
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
os.environ.setdefault("BM_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "build", "release"))
from harness import Beaconmux, Beaconsim  # noqa: E402

N = int(os.environ.get("BENCH_CONCURRENT", "1000"))
PATH = "/eth/v2/beacon/blocks/genesis"


async def one(port, headers):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(("GET %s HTTP/1.1\r\nHost: b\r\n%sConnection: close\r\n\r\n" % (PATH, headers)).encode())
    await w.drain()
    data = await r.read()
    w.close()
    return data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.1 ") else b"?"


async def burst(port, n, headers=""):
    return await asyncio.gather(*(one(port, headers) for _ in range(n)))


def node_requests(sim):
    return sum(sim.requests(i)["data"].get("getBlockV2", 0) for i in range(len(sim.nodes)))


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * N + 256)), hard))
    sim = Beaconsim(nodes=3, slot_ms=2000, node_specs={i: "slow=500" for i in range(3)})
    # no hedges: one read is one request (a hedge would add a second to a slow node's read)
    config = "failsafe:\n  hedge:\n    maxCount: 0\nupstreams:\n" + "".join(
        "  - url: %s\n" % u for u in sim.nodes)
    mux = Beaconmux(config_text=config)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            if all(s == "ready" for s in mux.node_states().values()):
                break
            time.sleep(0.1)
        for i in range(3):
            sim._json("DELETE", "/sim/v1/nodes/%d/requests" % i)
        t0 = time.time()
        codes = asyncio.run(burst(mux.port, N))
        took = time.time() - t0
        reached = node_requests(sim)
        ok = sum(1 for c in codes if c == b"200")
        c = mux.status()["cache"]["routes"]["block"]
        print("\ncoalescing: %d concurrent GET %s -> %d answered 200 in %.2f s; %d request(s) "
              "reached a node (cache: %d miss, %d coalesced, %d hits)"
              % (N, PATH, ok, took, reached, c["misses"], c["coalesced"], c["hits"]))
        for i in range(3):
            sim._json("DELETE", "/sim/v1/nodes/%d/requests" % i)
        m = min(N, 100)
        asyncio.run(burst(mux.port, m, "Cache-Control: no-cache\r\n"))
        print("baseline: %d concurrent reads with Cache-Control: no-cache -> %d requests reached "
              "a node" % (m, node_requests(sim)))
    finally:
        mux.stop()
        sim.stop()


if __name__ == "__main__":
    main()
