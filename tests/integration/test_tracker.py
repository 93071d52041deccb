# SPDX-License-Identifier: MIT
"""The cluster head tracker and cluster-relative health, end to end: beaconsim's six nodes
behind beaconmux, observed through /beaconmux/v1/status and the synthetic node endpoints,
and scored against /sim/v1/truth.

Nodes: n0 is the fastest (lag 0); n1 speaks Lighthouse's `event:head` style and n2 sends
fragmented CRLF streams (both lag 150 ms); n3..n5 lag 250 ms. Each test sets the
behaviours it needs and setUp puts every node back to normal (and waits until all are
ready). Waits are bounded polls: a cluster head is awaited within its own slot (the truth
gives when the next one starts), never observed after a fixed sleep.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import QUICK_NODES, Beaconmux, Beaconsim, main, now_ms, wait_for  # noqa: E402

SLOT_MS = 1000
NODES = 6
CONFIG = QUICK_NODES
NORMAL = {"fork": False, "optimistic": False, "syncing": False, "stale": False,
          "clock_skew": 0, "down": False}

class Tracker(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=NODES, slot_ms=SLOT_MS, slots_per_epoch=8, node_specs={
            0: "lag=0", 1: "lag=150,sse-style=lighthouse", 2: "lag=150,sse-fragment",
            3: "lag=250", 4: "lag=250", 5: "lag=250"})
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(cls.sim.nodes))
        cls.mux = Beaconmux(config_text=CONFIG + ups)
        try:
            cls.mux.wait_cluster_ready(15, what="a ready cluster with a head")
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        rc = cls.mux.stop()
        cls.sim.stop()
        assert rc == 0, "beaconmux exited with %s:\n%s" % (rc, "\n".join(cls.mux.stderr()[-30:]))

    def setUp(self):
        for i in range(NODES):
            self.sim.put_node(i, NORMAL)
        self.wait_all_ready()

    # ---- helpers ------------------------------------------------------------------------

    def wait_all_ready(self, timeout=10):
        wait_for(lambda: all(s == "ready" for s in self.mux.node_states().values()), timeout,
                 what="every node ready: %s" % self.mux.node_states())

    def ups(self):
        return {u["id"]: u for u in self.mux.status()["upstreams"]}

    def head(self):
        return self.mux.status()["cluster_head"]

    def current_slot(self):
        return self.sim.truth()["current_slot"]

    def wait_head_at(self, slot, root, seen=None):
        """Polls the status until the cluster head is `root` at `slot` and returns that status;
        fails once slot + 1 has started: the head is judged within its own slot, however long
        a loaded machine takes to get there. Every head observed on the way is appended to
        `seen` (when given), for the caller to judge too."""
        end = self.sim.truth(slot + 1)["start_ms"]
        while True:
            st = self.mux.status()
            h = st["cluster_head"]
            if seen is not None and h:
                seen.append(h)
            if h and (int(h["slot"]), h["root"]) == (slot, root):
                return st
            if now_ms() >= end:
                self.fail("the cluster head did not reach %s at slot %d within that slot: %s"
                          % (root, slot, h))
            time.sleep(0.005)

    def assert_canonical(self, head):
        t = self.sim.truth(int(head["slot"]))
        self.assertEqual(head["root"], t["root"], "cluster head at slot %s is not canonical: %s"
                         % (head["slot"], t))

    def node_get(self, path):
        st, h, body = self.mux.request("GET", path)
        return st, (json.loads(body) if body else None)

    # ---- tests --------------------------------------------------------------------------

    def test_fork_fastest_node_is_not_followed(self):
        self.sim.put_node(0, {"fork": True})
        self.mux.wait_state("n0", "forked", timeout=6)
        # from now on the cluster head stays canonical and never takes n0's branch
        first = self.current_slot() + 1
        seen = set()
        for s in range(first, first + 3):
            observed = []
            st = self.wait_head_at(s, self.sim.truth(s)["root"], observed)
            for h in observed:  # never n0's branch, not even for a moment
                self.assert_canonical(h)
            h = st["cluster_head"]
            ups = {u["id"]: u for u in st["upstreams"]}
            self.assertNotEqual(h["root"], ups["n0"]["head"]["root"])
            self.assertEqual(ups["n0"]["state"], "forked")
            self.assertTrue(ups["n0"]["forked"])
            self.assertFalse(ups["n0"]["voter"])
            for i in range(1, NODES):
                self.assertEqual(ups["n%d" % i]["state"], "ready", ups["n%d" % i])
            seen.add(h["root"])
        self.assertEqual(len(seen), 3)
        # re-joining the canonical chain: n0 recovers
        self.sim.put_node(0, {"fork": False})
        self.mux.wait_state("n0", "ready", timeout=8)
        wait_for(lambda: self.ups()["n0"]["relation"] in ("equal", "ancestor", "descendant"), 4,
                 what="n0 back on the cluster chain")

    def test_late_block_and_competing_blocks_end_on_the_quorum_chain(self):
        moves0 = self.mux.status()["tracker"]["moves"]
        late = self.current_slot() + 2
        comp = late + 3
        self.sim.scenario({"type": "late-block", "slot": late})
        self.sim.scenario({"type": "competing", "slot": comp, "nodes": [0]})
        tl, tc = self.sim.truth(late), self.sim.truth(comp)
        self.assertTrue(tl["late"] and tl["orphaned"])
        self.assertEqual(tc["alt_nodes"], [0])
        # the late block arrives and is followed (every node has it)...
        self.wait_head_at(late, tl["root"])
        # ...then the next proposer re-orgs it: the cluster head moves with the quorum
        nxt = self.sim.truth(late + 1)
        self.assertEqual(nxt["parent_root"], self.sim.truth(late - 1)["root"])
        h = self.wait_head_at(late + 1, nxt["root"])["cluster_head"]
        self.assertEqual(h["parent_root"], nxt["parent_root"])
        # two blocks at `comp`: the fastest node sees the minority's block; the cluster
        # head ends on the block the quorum holds, in that very slot
        st = self.wait_head_at(comp, tc["root"])
        n0 = {u["id"]: u for u in st["upstreams"]}["n0"]
        self.assertEqual(n0["head"]["root"], tc["alt_root"])
        after = self.sim.truth(comp + 1)
        h = self.wait_head_at(comp + 1, after["root"])["cluster_head"]
        self.assert_canonical(h)
        moves = self.mux.status()["tracker"]["moves"]
        self.assertGreaterEqual(moves["reorg"] - moves0["reorg"], 1)  # the late block's
        self.assertEqual(moves["jump"], moves0["jump"])
        self.wait_all_ready()

    def test_broken_nodes_get_their_state_the_others_stay_ready(self):
        self.sim.put_node(3, {"optimistic": True})
        self.sim.put_node(4, {"clock_skew": int(SLOT_MS * 1.6)})  # announces future slots
        self.sim.put_node(5, {"stale": True})
        want = {"n0": "ready", "n1": "ready", "n2": "ready", "n3": "optimistic",
                "n4": "time-discrepancy", "n5": "lagging"}
        wait_for(lambda: self.mux.node_states() == want, 8,
                 what="states %s (have %s)" % (want, self.mux.node_states()))
        ups = self.ups()
        self.assertTrue(ups["n4"]["time_discrepancy"])
        self.assertGreaterEqual(ups["n5"]["lag"], 2)
        for i in range(3):
            self.assertLessEqual(ups["n%d" % i]["lag"], 1)
        self.assert_canonical(self.head())
        st, _ = self.node_get("/eth/v1/node/health")
        self.assertEqual(st, 200)
        # a syncing node, in turn
        self.sim.put_node(5, {"stale": False, "syncing": True})
        self.mux.wait_state("n5", "syncing", timeout=5)
        for i in range(3):
            self.assertEqual(self.mux.node_states()["n%d" % i], "ready")

    def test_node_health_and_syncing_follow_the_rules(self):
        h = self.head()
        st, body = self.node_get("/eth/v1/node/syncing")
        self.assertEqual(st, 200)
        d = body["data"]
        self.assertEqual(set(d), {"head_slot", "sync_distance", "is_syncing", "is_optimistic",
                                  "el_offline"})
        self.assertIsInstance(d["head_slot"], str)
        self.assertIsInstance(d["sync_distance"], str)
        self.assertGreaterEqual(int(d["head_slot"]), int(h["slot"]))
        self.assertLessEqual(int(d["sync_distance"]), 1)
        self.assertEqual((d["is_syncing"], d["is_optimistic"], d["el_offline"]),
                         (False, False, False))
        self.assertEqual(self.node_get("/eth/v1/node/health")[0], 200)
        self.assertEqual(self.node_get("/eth/v1/node/health?syncing_status=299")[0], 200)
        self.assertEqual(self.node_get("/eth/v1/node/health?syncing_status=abc")[0], 400)
        st, body = self.node_get("/eth/v1/node/peer_count")
        self.assertEqual(st, 200)
        self.assertIn("connected", body["data"])
        # every node syncing: 206, or syncing_status
        for i in range(NODES):
            self.sim.put_node(i, {"syncing": True})
        wait_for(lambda: self.node_get("/eth/v1/node/health")[0] == 206, 5,
                 what="health 206 with every node syncing")
        self.assertEqual(self.node_get("/eth/v1/node/health?syncing_status=299")[0], 299)
        st, body = self.node_get("/eth/v1/node/syncing")
        self.assertTrue(body["data"]["is_syncing"])
        self.assertEqual(self.node_get("/eth/v1/node/peer_count")[0], 503)  # none ready
        # every node down: 503
        for i in range(NODES):
            self.sim.put_node(i, {"down": True})
        wait_for(lambda: self.node_get("/eth/v1/node/health")[0] == 503, 5,
                 what="health 503 with every node down")
        self.assertEqual(self.node_get("/eth/v1/node/health?syncing_status=299")[0], 503)
        for i in range(NODES):
            self.sim.put_node(i, NORMAL)
        self.wait_all_ready(12)
        wait_for(lambda: self.node_get("/eth/v1/node/health")[0] == 200, 5, what="health 200")

    def test_lighthouse_and_fragmented_streams_give_the_same_heads(self):
        # the heads each node's stream announced, per slot, over four slots
        seen = {"n0": {}, "n1": {}, "n2": {}, "cluster": {}}
        first = self.current_slot() + 1
        end = self.sim.truth(first + 4)["start_ms"]
        while now_ms() < end:
            st = self.mux.status()
            h = st["cluster_head"]
            seen["cluster"][int(h["slot"])] = h["root"]
            for u in st["upstreams"]:
                if u["id"] in seen and u["head"]:
                    seen[u["id"]][int(u["head"]["slot"])] = u["head"]["root"]
            time.sleep(0.1)  # sampling period, not a synchronisation
        window = range(first, first + 3)
        for s in window:
            root = self.sim.truth(s)["root"]
            for k in seen:
                self.assertEqual(seen[k].get(s), root, "%s at slot %d: %s" % (k, s, seen[k]))
        ups = self.ups()
        for i in range(NODES):
            u = ups["n%d" % i]
            self.assertEqual(u["stream"]["bad_events"], 0, u)
            self.assertTrue(u["stream"]["connected"], u)
            self.assertEqual(u["stream"]["topic"], "head_v2")
            self.assertTrue(u["delays_ms"], u)
        # the fastest node announces most heads first
        self.assertGreater(ups["n0"]["heads_first"], ups["n3"]["heads_first"])

    def test_node_killed_and_restarted_reconnects(self):
        before = self.ups()["n2"]["stream"]["connects"]
        self.sim.put_node(2, {"down": True})
        wait_for(lambda: not self.ups()["n2"]["stream"]["connected"], 4, what="n2's stream down")
        self.mux.wait_state("n2", "unreachable", timeout=5)
        self.assertEqual(self.mux.node_states()["n0"], "ready")
        self.sim.put_node(2, {"down": False})
        wait_for(lambda: self.ups()["n2"]["stream"]["connected"], 10, what="n2's stream back")
        self.mux.wait_state("n2", "ready", timeout=5)

        def current():
            st = self.mux.status()
            n2 = {u["id"]: u for u in st["upstreams"]}["n2"]
            return (n2["head"] and not n2["head"]["stale"]
                    and int(n2["head"]["slot"]) >= int(st["cluster_head"]["slot"]) - 1)
        wait_for(current, 4, what="n2's head current again")
        self.assertGreater(self.ups()["n2"]["stream"]["connects"], before)
        self.assert_canonical(self.head())


if __name__ == "__main__":
    main()
