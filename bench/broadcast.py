#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The added latency of a broadcast write: the same small POST straight to one beacon node,
through beaconmux to one node (the read path, for comparison), and through beaconmux to all three
(broadcast). Three beaconsim nodes, one keep-alive client per path, N sequential requests
each, two rounds (the first warms up). Prints p50/p90/p99 per path.

    bench/broadcast.py [N]        (default 2000; binaries from build/release, or $BM_BIN_DIR)
"""
import http.client
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("BM_BIN_DIR", os.path.join(HERE, "..", "build", "release"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

SIG = "0x" + "cc" * 96
ROOT = "0x" + "ab" * 32
JSON = {"Content-Type": "application/json"}
SYNC_MSG = json.dumps([{"slot": "1", "beacon_block_root": ROOT, "validator_index": "5",
                        "signature": SIG}]).encode()


def timed(port, path, body, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.request("POST", path, body, JSON)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit("%s answered %d" % (path, r.status))
        out.append((time.perf_counter() - t0) * 1000)
    c.close()
    return sorted(out)


def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    sim = harness.Beaconsim(nodes=3, slot_ms=12000, slots_per_epoch=32)
    fd, cfg = tempfile.mkstemp(suffix=".yaml")
    os.write(fd, ("upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                          for i, u in enumerate(sim.nodes))).encode())
    os.close(fd)
    # info, not the harness's debug: a log line per write would be measured too
    mux = harness.Proc([os.path.join(harness.BIN_DIR, "beaconmux"), "--listen", "127.0.0.1:0",
                        "--log-level", "info", "--config", cfg])
    try:
        port = int(mux.wait_line(r"listening on http://127\.0\.0\.1:(\d+)").group(1))

        def states():
            st = harness.http_request(port, "GET", "/beaconmux/v1/status")[2]
            return [u["state"] for u in json.loads(st)["upstreams"]]
        harness.wait_for(lambda: states() == ["ready"] * 3, 15, what="three ready nodes")
        node = int(sim.nodes[0].rsplit(":", 1)[1])
        paths = [("straight to one node", node, "/eth/v1/beacon/pool/sync_committees", SYNC_MSG),
                 ("beaconmux, read path to one node", port, "/eth/v1/beacon/states/head/validators",
                  b'{"ids":["1","2"]}'),
                 ("beaconmux, broadcast to 3 nodes", port, "/eth/v1/beacon/pool/sync_committees",
                  SYNC_MSG)]
        for rnd in range(2):
            res = [(name, timed(p, path, body, n if rnd else max(50, n // 10)))
                   for name, p, path, body in paths]
        print("%-34s %9s %9s %9s   (n=%d, ms)" % ("path", "p50", "p90", "p99", n))
        for name, v in res:
            print("%-34s %9.3f %9.3f %9.3f" % (name, pct(v, 50), pct(v, 90), pct(v, 99)))
        added = pct(res[2][1], 50) - pct(res[0][1], 50)
        print("added by the broadcast at p50: %.3f ms over a direct POST, %.3f ms over one-node "
              "proxying" % (added, pct(res[2][1], 50) - pct(res[1][1], 50)))
    finally:
        mux.stop()
        sim.stop()
        os.unlink(cfg)


if __name__ == "__main__":
    main()
