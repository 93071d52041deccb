# SPDX-License-Identifier: MIT
"""The read path end to end: beaconmux in front of beaconsim, each mechanism of
docs/read-path.md shown on real transfers (balancing, breaker, hedge, 429, archive routing,
consensus, rules, blocked paths, client routes, sticky sessions, the deadline, SSZ 415)."""
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Beaconmux, Beaconsim, main, wait_for  # noqa: E402

# The response cache is off: every read here must reach the read path, whose mechanisms are
# counted on the nodes (docs/cache.md; test_edge covers the cache in front of it).
BASE = """
cache:
  enabled: false
timeouts:
  connect: 300ms
  read: 2s
discovery:
  retryInterval: 200ms
"""

ROUTE = "/eth/v1/beacon/states/head/finality_checkpoints"


def upstreams(sim, extra=None):
    """The sim's nodes as n0, n1, ...; extra[i] adds lines to node i's entry."""
    out = "upstreams:\n"
    for i, u in enumerate(sim.nodes):
        out += "  - id: n%d\n    url: %s\n" % (i, u)
        for line in (extra or {}).get(i, []):
            out += "    %s\n" % line
    return out


def count(sim, i, op):
    return sim.requests(i)["data"].get(op, 0)


class ReadPath(unittest.TestCase):
    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()

    def start(self, nodes=3, specs=None, config="", extra=None, ready=True):
        sim = Beaconsim(nodes=nodes, slot_ms=1000, node_specs=specs)
        self.procs.append(sim)
        mux = Beaconmux(config_text=BASE + config + upstreams(sim, extra))
        self.procs.append(mux)
        if ready:
            for i in range(nodes):
                mux.wait_state("n%d" % i, "ready")
        for i in range(nodes):
            sim._json("DELETE", "/sim/v1/nodes/%d/requests" % i)
        return sim, mux

    def node_read(self, mux, i):
        return mux.status()["upstreams"][i]["read"]

    def test_balances_and_shows_the_score(self):
        sim, mux = self.start(config="routing:\n  loadBalancing: round-robin\n")
        for _ in range(30):
            st, _, _ = mux.request("GET", ROUTE)
            self.assertEqual(st, 200)
        counts = [count(sim, i, "getStateFinalityCheckpoints") for i in range(3)]
        self.assertEqual(sum(counts), 30)
        self.assertEqual(counts, [10, 10, 10])  # smooth round-robin, equal weights
        read = self.node_read(mux, 0)
        for term in ("errorRate", "latency", "headLag", "syncDistance"):
            self.assertGreater(read["terms"][term], 0)
            self.assertLessEqual(read["terms"][term], 1)
        self.assertEqual(read["breaker"], "closed")
        self.assertEqual(mux.status()["read_path"]["strategy"], "round-robin")

    def test_weights_and_tiers(self):
        sim, mux = self.start(config="routing:\n  loadBalancing: round-robin\n",
                              extra={0: ["weight: 3"], 2: ["priority: 1"]})
        for _ in range(40):
            self.assertEqual(mux.request("GET", ROUTE)[0], 200)
        counts = [count(sim, i, "getStateFinalityCheckpoints") for i in range(3)]
        self.assertEqual(counts, [30, 10, 0])  # n2 is a backup tier: never used while tier 0 serves

    def test_busy_node_passed_over_for_the_next_tier(self):
        # n0 takes three requests at once (maxConnections); n1 is a backup tier, used only
        # when n0 is busy; the route is one the monitor never asks
        route = "/eth/v1/beacon/states/head/fork"
        sim, mux = self.start(nodes=2, config="failsafe:\n  hedge: {maxCount: 0}\n",
                              extra={0: ["maxConnections: 3"], 1: ["priority: 1", "maxConnections: 3"]})
        sim.put_node(0, {"slow": 1500})
        results = []

        def read():
            results.append(mux.request("GET", route)[0])

        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: mux.upstreams()["n0"]["in_flight"] == 3, 5, what="n0 holding three reads")
        self.assertEqual(count(sim, 1, "getStateFork"), 0)  # tier 1 untouched so far
        t0 = time.monotonic()
        st, _, _ = mux.request("GET", route)
        took = time.monotonic() - t0
        self.assertEqual(st, 200)
        self.assertLess(took, 1.0)  # not queued behind n0's reads for a connection
        self.assertEqual(count(sim, 1, "getStateFork"), 1)
        for t in threads:
            t.join(10)
        self.assertEqual(results, [200, 200, 200])
        self.assertEqual(count(sim, 0, "getStateFork"), 3)
        self.assertGreaterEqual(mux.status()["read_path"]["busy_skips"], 1)
        # every node busy: a read still queues on the best one instead of failing
        for i in range(2):
            sim.put_node(i, {"slow": 0, "hang": True})
        # a hung node leaves `ready` when the monitor's head probe goes unanswered, each at
        # its own moment: a read placed between the two verdicts went to the node still
        # ready, not to the better tier. Once both are judged, the tier alone decides.
        for i in range(2):
            mux.wait_state("n%d" % i, "unreachable", timeout=10)
        threads = [threading.Thread(target=read) for _ in range(7)]
        for t in threads:
            t.start()
        wait_for(lambda: mux.status()["read_path"]["busy_waits"] >= 1, 5,
                 what="a read placed while every node is busy")
        ups = mux.upstreams()
        self.assertEqual((ups["n0"]["in_flight"], ups["n1"]["in_flight"]), (4, 3))
        for i in range(2):
            sim.put_node(i, {"hang": False})
        for t in threads:
            t.join(10)
        self.assertEqual(results, [200] * 10)

    def test_node_answering_500_to_everything_is_cut_off(self):
        sim, mux = self.start(config="failsafe:\n  circuitBreaker: {failureThreshold: 3}\n")
        sim.put_node(0, {"error_rate": 1})
        for _ in range(40):
            st, _, _ = mux.request("GET", ROUTE)
            self.assertEqual(st, 200)  # retried on another node every time
        wait_for(lambda: self.node_read(mux, 0)["breaker"] == "open", 5, what="breaker open")
        before = count(sim, 0, "getStateFinalityCheckpoints")
        self.assertLessEqual(before, 10)
        for _ in range(20):
            self.assertEqual(mux.request("GET", ROUTE)[0], 200)
        self.assertEqual(count(sim, 0, "getStateFinalityCheckpoints"), before)
        self.assertGreaterEqual(self.node_read(mux, 0)["breaker_opens"], 1)
        # the duty path still uses it: broadcasts and races are not the read path's
        self.assertEqual(mux.node_states()["n0"], "ready")

    def test_hedged_read_beats_a_slow_node(self):
        sim, mux = self.start(nodes=2, config=(
            "routing:\n  loadBalancing: round-robin\n"
            "failsafe:\n  hedge: {delay: 150ms, maxCount: 1, maxRatio: 100%}\n"))
        sim.put_node(0, {"slow": 1500})
        times = []
        for _ in range(4):
            t0 = time.monotonic()
            st, _, _ = mux.request("GET", ROUTE)
            times.append(time.monotonic() - t0)
            self.assertEqual(st, 200)
        self.assertLess(max(times), 1.0, times)  # no read waited for the slow node
        rp = mux.status()["read_path"]
        self.assertGreaterEqual(rp["hedges_won"], 1)
        self.assertGreaterEqual(count(sim, 0, "getStateFinalityCheckpoints"), 1)

    def test_throttled_node_honours_retry_after(self):
        sim, mux = self.start(extra={0: ["autoTune: {min: 1, max: 20}"]})
        sim.put_node(0, {"spec": "throttle=1,retry-after=3"})
        for _ in range(20):
            self.assertEqual(mux.request("GET", ROUTE)[0], 200)
        read = self.node_read(mux, 0)
        self.assertGreaterEqual(read["throttled"], 1)
        self.assertLess(read["bucket"]["rate"], 20)  # multiplicative decrease
        # within the Retry-After the node was asked once at most by the read path
        self.assertLessEqual(count(sim, 0, "getStateFinalityCheckpoints"), 2)

    def test_archive_node_serves_pruned_history(self):
        sim, mux = self.start(specs={0: "prune=2", 1: "prune=2"},
                              extra={2: ["archive: true", "priority: 1"]})
        sim.wait_slot(6)
        # fall-through: the pruned node's 404 never reaches the client
        st, _, body = mux.request("GET", "/eth/v1/beacon/blocks/1/root")
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["data"]["root"], sim.truth(1)["root"])
        self.assertEqual(count(sim, 2, "getBlockRoot"), 1)
        # a blob endpoint's custody 400 falls through the same way
        st, _, body = mux.request("GET", "/eth/v1/beacon/blob_sidecars/1")
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["data"], [])
        self.assertGreaterEqual(mux.status()["read_path"]["archive_fallthrough"], 2)
        # recent history stays on the tier-0 nodes
        head = sim.truth()["current_slot"]
        self.assertEqual(mux.request("GET", "/eth/v1/beacon/blocks/%d/root" % head)[0], 200)
        self.assertEqual(count(sim, 2, "getBlockRoot"), 1)

    def test_archive_first_beyond_retention_and_404_without_archive(self):
        sim, mux = self.start(specs={0: "prune=2", 1: "prune=2"},
                              config="routing:\n  retention: {stateSlots: 2}\n",
                              extra={2: ["archive: true"]})
        sim.wait_slot(6)
        st, _, body = mux.request("GET", "/eth/v1/beacon/states/1/root")
        self.assertEqual(st, 200, body)
        self.assertEqual(count(sim, 0, "getStateRoot") + count(sim, 1, "getStateRoot"), 0)
        self.assertEqual(mux.status()["read_path"]["archive_routed"], 1)

    def test_pruned_404_passes_without_archive(self):
        sim, mux = self.start(nodes=2, specs={0: "prune=2", 1: "prune=2"})
        sim.wait_slot(6)
        st, _, body = mux.request("GET", "/eth/v1/beacon/headers/1")
        self.assertEqual(st, 404)
        self.assertIn("pruned", json.loads(body)["message"])
        self.assertGreaterEqual(mux.status()["read_path"]["archive_missing"], 1)

    def test_consensus_read(self):
        rule = ("routeRules:\n"
                "  - method: GET\n    path: /eth/v1/beacon/states/*/root\n"
                "    consensus: {query: 3, agree: 2}\n"
                "  - path: /eth/v1/beacon/states/*/fork\n"
                "    consensus: {query: 3, agree: 3}\n")
        sim, mux = self.start(config=rule)
        sim.put_node(0, {"fork": True})
        sim.wait_slot(sim.truth()["current_slot"] + 2)
        slot = sim.truth()["current_slot"] - 1
        st, _, body = mux.request("GET", "/eth/v1/beacon/states/%d/root" % slot)
        self.assertEqual(st, 200, body)
        for i in range(3):
            self.assertEqual(count(sim, i, "getStateRoot"), 1)  # asked all at once
        # all three must agree on a state the forked node sees differently: 502 naming them
        st, _, body = mux.request("GET", "/eth/v1/beacon/states/%d/root" % slot,
                                  headers={"X-Unused": "1"})
        self.assertEqual(st, 200)
        sim.put_node(1, {"fork": True})
        sim.wait_slot(sim.truth()["current_slot"] + 2)
        slot = sim.truth()["current_slot"] - 1
        st, _, body = mux.request("GET", "/eth/v1/beacon/states/%d/root" % slot)
        self.assertEqual(st, 502, body)
        msg = json.loads(body)["message"]
        for n in ("n0", "n1", "n2"):
            self.assertIn(n, msg)
        self.assertGreaterEqual(mux.status()["read_path"]["consensus_failed"], 1)

    def test_rules_blocked_paths_and_client_routes(self):
        sim, mux = self.start(config=(
            'blockedPaths: ["/eth/v1/debug/*"]\n'
            "clientRoutes:\n  - {prefix: /only-n2, upstreams: [n2], stripPrefix: true}\n"
            "routeRules:\n  - {path: /eth/v1/node/peers, blocked: true}\n"
            '  - {path: "/eth/v1/beacon/headers/*", upstreams: [n1]}\n'))
        for path in ("/eth/v1/debug/fork_choice", "/eth/v1/%64ebug/beacon/heads",
                     "/eth/v1/node/peers"):
            st, _, body = mux.request("GET", path)
            self.assertEqual(st, 403, path)
            self.assertEqual(json.loads(body)["code"], 403)
        for _ in range(5):
            self.assertEqual(mux.request("GET", "/only-n2" + ROUTE)[0], 200)
        self.assertEqual(count(sim, 2, "getStateFinalityCheckpoints"), 5)
        for _ in range(5):
            self.assertEqual(mux.request("GET", "/eth/v1/beacon/headers/head")[0], 200)
        self.assertEqual(count(sim, 1, "getBlockHeader"), 5)
        self.assertEqual(mux.status()["read_path"]["blocked"], 3)

    def test_sticky_sessions(self):
        sim, mux = self.start(config=(
            "routing:\n  stickySessions: {enabled: true, key: X-Client, rebalanceFactor: 10}\n"))
        for _ in range(15):
            self.assertEqual(mux.request("GET", ROUTE, headers={"X-Client": "alice"})[0], 200)
        counts = [count(sim, i, "getStateFinalityCheckpoints") for i in range(3)]
        self.assertEqual(sorted(counts), [0, 0, 15])
        # the node drops out: the client moves, and sticks to its new node
        sim.put_node(counts.index(15), {"down": True})
        for _ in range(10):
            self.assertEqual(mux.request("GET", ROUTE, headers={"X-Client": "alice"})[0], 200)
        after = [count(sim, i, "getStateFinalityCheckpoints") - counts[i] for i in range(3)]
        self.assertEqual(sorted(after), [0, 0, 10])

    def test_deadline(self):
        sim, mux = self.start(nodes=2, config="failsafe:\n  timeout: 400ms\n")
        for i in range(2):
            sim.put_node(i, {"slow": 1500})
        t0 = time.monotonic()
        st, _, body = mux.request("GET", ROUTE)
        elapsed = time.monotonic() - t0
        self.assertEqual(st, 504, body)
        self.assertLess(elapsed, 1.0)
        self.assertIn("400 ms", json.loads(body)["message"])

    def test_ssz_refusing_node_is_remembered(self):
        sim, mux = self.start(specs={0: "no-ssz"}, config="routing:\n  loadBalancing: round-robin\n")
        ssz = {"Accept": "application/octet-stream"}
        for _ in range(6):
            st, h, body = mux.request("GET", "/eth/v2/beacon/blocks/head", headers=ssz)
            self.assertEqual(st, 200)
            self.assertEqual(h.get("content-type"), "application/octet-stream")
        self.assertEqual(count(sim, 0, "getBlockV2"), 1)  # asked once, then remembered
        self.assertEqual(mux.status()["read_path"]["ssz_refused"], 1)


if __name__ == "__main__":
    main()
