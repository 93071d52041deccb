#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Shared state's cost: beaconmux with state.driver local against redis, in the same run.

beaconsim with three nodes; a redis-server on a free loopback port; instances L (local), and
R1, R2 (redis, the same prefix). Prints, for L against R1, asked alternately so that both see
the same load and the same slots:
  - a duty race: attestation_data for the current slot (p50/p99 ms over BENCH_SAMPLES);
  - a duty write: prepare_beacon_proposer of one validator (each one also writes Redis);
  - cache-hit throughput: wrk on one block by root (a memory hit) through L and through R1;
and the second tier's cost: one block by root per slot fetched through R1 (a node is asked),
then through R2 (a second-tier hit: Redis instead of a node), then R2 again (a memory hit).
Each duty figure is given twice: as the client saw it (connect, send, answer read) and as
beaconmux measured it itself (its access log's duration, from the request's arrival to the
answer's last byte handed to the kernel), so that time spent outside the process (the
machine's scheduler, the other processes a write wakes) shows apart from time spent in it.
Environment: BM_BIN_DIR (build/release), BENCH_SAMPLES (200), BENCH_SECONDS (wrk, 5),
BENCH_CONNECTIONS (32).
"""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("BM_BIN_DIR", os.path.join(HERE, "..", "build", "release"))
from harness import Beaconmux, Beaconsim, Proc, wait_for  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "200"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
CONNS = int(os.environ.get("BENCH_CONNECTIONS", "32"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def timed(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    t0 = time.perf_counter()
    c.request(method, path, body, headers)
    r = c.getresponse()
    data = r.read()
    took = (time.perf_counter() - t0) * 1000
    c.close()
    return r.status, data, took


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def line(name, xs):
    return "%-34s p50 %7.3f ms  p99 %7.3f ms" % (name, statistics.median(xs), pct(xs, 99))


def server_times(m):
    """The access log's durations (ms) of the duty read and the duty write."""
    out = {"attestation_data": [], "prepare_beacon_proposer": []}
    for ln in m.stdout() + m.stderr():
        for name in out:
            if name in ln and "\" 200 " in ln:
                for w in ln.split():
                    if w.endswith("ms") and w[:-2].replace(".", "", 1).isdigit():
                        out[name].append(float(w[:-2]))
    return out


def wrk(port, path):
    out = subprocess.run(["wrk", "-t2", "-c%d" % CONNS, "-d%ds" % SECONDS,
                          "http://127.0.0.1:%d%s" % (port, path)],
                         capture_output=True, text=True).stdout
    for ln in out.splitlines():
        if ln.startswith("Requests/sec:"):
            return float(ln.split()[1])
    return 0.0


def main():
    redis_dir = tempfile.mkdtemp(prefix="bm-bench-redis-")
    rport = free_port()
    redis = Proc(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", redis_dir, "--loglevel", "warning"])
    sim = Beaconsim(nodes=3, slot_ms=1000, slots_per_epoch=8)
    muxes = []
    try:
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(sim.nodes))
        shared = ("state:\n  driver: redis\n  redis:\n    url: \"redis://127.0.0.1:%d/0\"\n"
                  "    prefix: \"bench:\"\n" % rport)
        access = "log:\n  access: true\n"
        local = Beaconmux(config_text=access + ups)
        r1 = Beaconmux(config_text=access + ups + shared)
        r2 = Beaconmux(config_text=ups + shared)
        muxes += [local, r1, r2]
        for m in muxes:
            for i in range(3):
                m.wait_state("n%d" % i, "ready", timeout=15)
        wait_for(lambda: r1.status()["state"]["available"], 10, what="redis")
        sim.wait_slot(3)

        race = {"local": [], "redis": []}
        write = {"local": [], "redis": []}
        for k in range(SAMPLES):
            slot = sim.truth()["current_slot"]
            for name, m in (("local", local), ("redis", r1)) if k % 2 else (("redis", r1), ("local", local)):
                st, _, ms = timed(m.port, "GET", "/eth/v1/validator/attestation_data?slot=%d"
                                  "&committee_index=0" % slot)
                if st == 200:
                    race[name].append(ms)
                body = json.dumps([{"validator_index": str(1000 + k),
                                    "fee_recipient": "0x" + "ab" * 20}]).encode()
                st, _, ms = timed(m.port, "POST", "/eth/v1/validator/prepare_beacon_proposer", body)
                if st == 200:
                    write[name].append(ms)
        inside = {name: server_times(m) for name, m in (("local", local), ("redis", r1))}
        print("duty answer times, driver local against redis (same run, alternating; client "
              "side, then beaconmux's own):")
        for name in ("local", "redis"):
            print("  " + line("attestation_data (%s)" % name, race[name]))
            print("  " + line("  inside beaconmux", inside[name]["attestation_data"]))
        for name in ("local", "redis"):
            print("  " + line("prepare_beacon_proposer (%s)" % name, write[name]))
            print("  " + line("  inside beaconmux", inside[name]["prepare_beacon_proposer"]))

        # the second tier's cost: one block per slot, fetched R1 (node), R2 (tier), R2 (memory)
        node, tier, mem = [], [], []
        seen = set()
        for _ in range(min(SAMPLES, 40)):
            t = sim.truth()
            root = t["head"]["root"]
            if root in seen:
                sim.wait_slot(t["current_slot"] + 1)
                continue
            seen.add(root)
            path = "/eth/v2/beacon/blocks/%s" % root
            st, _, ms = timed(r1.port, "GET", path)
            if st != 200:
                continue
            node.append(ms)
            wait_for(lambda: r1.status()["state"]["cache"]["puts"] >= len(node), 5, what="put")
            st, _, ms = timed(r2.port, "GET", path)
            tier.append(ms)
            st, _, ms = timed(r2.port, "GET", path)
            mem.append(ms)
        hits = sum(r["tier_hits"] for r in r2.status()["cache"]["routes"].values())
        print("a block by root (%d blocks; %d second-tier hits on R2):" % (len(node), hits))
        print("  " + line("asked of a node (R1, a miss)", node))
        print("  " + line("second-tier hit (R2, Redis)", tier))
        print("  " + line("memory hit (R2 again)", mem))

        path = "/eth/v2/beacon/blocks/%s" % sorted(seen)[0]
        for m in (local, r1):
            timed(m.port, "GET", path)
        rl, rr = wrk(local.port, path), wrk(r1.port, path)
        print("cache-hit throughput (wrk, %d connections, %d s, one block): local %.0f req/s, "
              "redis %.0f req/s (%.2fx)" % (CONNS, SECONDS, rl, rr, rr / rl if rl else 0))
    finally:
        for m in muxes:
            m.stop()
        sim.stop()
        redis.p.kill()
        redis.stop()
        shutil.rmtree(redis_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
