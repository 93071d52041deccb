#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cost of a /metrics scrape with 20 upstreams (the goal: under 2 ms).

beaconsim runs 20 nodes, beaconmux has all of them as upstreams, with the access log on in
JSON: each line carries the server-side duration of a request, from its complete head to the
end of its answer, which for /metrics is building the whole exposition and queueing it. The
script scrapes /metrics and, as the baseline in the same process, the JSON status page
(/beaconmux/v1/status, which reads the same counters) alternately, SCRAPES times each, and
prints the percentiles of both, their ratio and the exposition's size.

Usage: bench/metrics.py   (BM_BIN_DIR: the binaries, default build/release; SCRAPES: 300)
"""
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
os.environ.setdefault("BM_BIN_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                 "build", "release"))
import harness  # noqa: E402

NODES = 20
SCRAPES = int(os.environ.get("SCRAPES", "300"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    harness.BIN_DIR = os.environ["BM_BIN_DIR"]
    sim = harness.Beaconsim(nodes=NODES, slot_ms=2000, slots_per_epoch=8)
    cfg = "log:\n  access: true\n  format: json\nupstreams:\n" + "".join(
        "  - id: node-%02d\n    url: %s\n" % (i, u) for i, u in enumerate(sim.nodes))
    mux = harness.Beaconmux(config_text=cfg)
    try:
        harness.wait_for(lambda: sum(s == "ready" for s in mux.node_states().values()) == NODES,
                         60, interval=0.2, what="20 ready nodes")
        # fill the figures: duty reads, reads, a write
        for _ in range(20):
            slot = sim.truth()["current_slot"]
            mux.request("GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
            mux.request("GET", "/eth/v1/node/version")
        size = 0
        for _ in range(SCRAPES):
            st, _, body = mux.request("GET", "/metrics")
            assert st == 200
            size = len(body)
            mux.request("GET", "/beaconmux/v1/status")
        time.sleep(0.5)  # the last log lines reach the pipe
        dur = {"/metrics": [], "/beaconmux/v1/status": []}
        for line in mux.stderr():
            if line.startswith("{") and '"msg":"access"' in line:
                rec = json.loads(line)
                if rec["path"] in dur:
                    dur[rec["path"]].append(rec["duration_ms"])
        m, s = dur["/metrics"], dur["/beaconmux/v1/status"][-SCRAPES:]  # (waits read it too)
        assert len(m) == SCRAPES and len(s) == SCRAPES, (len(m), len(s))
        lines = sum(1 for l in body.decode().splitlines() if l and not l.startswith("#"))
        load = os.getloadavg()[0]
        print("/metrics with %d upstreams: %d bytes, %d samples; server-side p50 %.3f ms, p99 %.3f ms, "
              "max %.3f ms over %d scrapes (load %.1f)" % (NODES, size, lines, statistics.median(m),
                                                         pct(m, 99), max(m), SCRAPES, load))
        print("baseline /beaconmux/v1/status, same process: p50 %.3f ms, p99 %.3f ms; "
              "/metrics / status at p50: %.2f" % (statistics.median(s), pct(s, 99),
                                                 statistics.median(m) / statistics.median(s)))
    finally:
        mux.stop()
        sim.stop()


if __name__ == "__main__":
    main()
