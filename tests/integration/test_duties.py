# SPDX-License-Identifier: MIT
"""Duties, aggregation reads and liveness through beaconmux, against beaconsim.

Three simulated nodes behind one beaconmux (1 s slots, 4 slots per epoch). What it shows:
- whichever node is left while the two others are down or hung, every duty endpoint is
  answered well before a validator client would give up (each request under 2 s);
- aggregates and sync contributions carry the most participants any node has;
- duties carry the dependent root of the canonical chain (/sim/v1/truth), as the nodes
  themselves say, and a forked node's duties (another dependent root) are never served
  while the cluster is on the canonical chain;
- liveness reports a validator live when any one node saw it, and answers 503 right after
  beaconmux or every node restarted within the queried epoch.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (QUICK_NODES, Beaconmux, Beaconsim, att_data_root, http_request,  # noqa: E402
                     main, wait_for)

CONFIG = QUICK_NODES
SPE = 4
SLOT_MS = 1000
CLIENT_TIMEOUT_S = 2.0  # Vouch gives up after 2 s; every answer must come before
IDX = json.dumps([str(i) for i in range(16)])


def get(url, path, headers=None, method="GET", body=None):
    port = int(url.rsplit(":", 1)[1])
    t0 = time.monotonic()
    st, h, raw = http_request(port, method, path, body, headers, timeout=10)
    return st, h, raw, time.monotonic() - t0


def bitlist_count(hexs):
    b = bytes.fromhex(hexs[2:])
    return sum(bin(x).count("1") for x in b) - 1  # the delimiter


def bitvector_count(hexs):
    return sum(bin(x).count("1") for x in bytes.fromhex(hexs[2:]))


class Duties(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=SPE)
        cls.mux = cls.start_mux()
        cls.max_latency = {}

    @classmethod
    def start_mux(cls):
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(cls.sim.nodes))
        mux = Beaconmux(config_text=CONFIG + ups)
        for i in range(3):
            mux.wait_state("n%d" % i, "ready", timeout=15)
        wait_for(lambda: mux.status().get("cluster_head"), 10, what="a cluster head")
        return mux

    @classmethod
    def tearDownClass(cls):
        rc = cls.mux.stop()
        cls.sim.stop()
        assert rc == 0, "beaconmux exited with %s:\n%s" % (rc, "\n".join(cls.mux.stderr()[-30:]))
        if cls.max_latency:
            sys.stderr.write("\nslowest answer per endpoint with one node left (s): %s\n" % ", ".join(
                "%s %.3f" % kv for kv in sorted(cls.max_latency.items())))

    def setUp(self):
        for i in range(3):
            self.sim.put_node(i, {"down": False, "hang": False, "fork": False, "slow": 0})

    # ---- helpers ----------------------------------------------------------------------------

    def mux_req(self, method, path, body=None, headers=None):
        st, h, raw, dt = get(self.mux.url(""), path, headers, method, body)
        return st, h, raw, dt

    def wait_epoch_at_least(self, epoch):
        wait_for(lambda: self.sim.truth()["current_epoch"] >= epoch, (epoch + 2) * SPE * SLOT_MS / 1000.0,
                 what="epoch %d" % epoch)

    def wait_early_in_epoch(self):
        """Waits until at least 1.5 slots of the current epoch remain; returns the epoch."""
        def ok():
            t = self.sim.truth()
            end = t["genesis_ms"] + (t["current_epoch"] + 1) * SPE * SLOT_MS
            return t["current_epoch"] if end - t["now_ms"] > 1.5 * SLOT_MS else None
        e = wait_for(ok, SPE * SLOT_MS / 1000.0 + 2, what="an early point of an epoch")
        return e

    def dependent_root(self, slot):
        if slot < 0:
            slot = 0
        return self.sim.truth(slot)["block_root_at_slot"]

    def all_duty_requests(self, node):
        """(name, method, path, body, headers, ok statuses) for every duty read, built from
        what `node` (the one left) knows: its attestation data and head."""
        t = self.sim.truth()
        e, slot = t["current_epoch"], t["current_slot"]
        url = self.sim.nodes[node]
        st, _, raw, _ = get(url, "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot)
        self.assertEqual(st, 200, raw)
        data_root = att_data_root(json.loads(raw)["data"])
        st, _, raw, _ = get(url, "/eth/v1/beacon/headers/head")
        head = json.loads(raw)["data"]["root"]
        # the contribution is asked at the head's own slot: a slot may begin between the
        # truth read above and this head, and a node has no contribution for a block at a
        # later slot than the one asked (404)
        head_slot = int(json.loads(raw)["data"]["header"]["message"]["slot"])
        agg = "/eth/v2/validator/aggregate_attestation?attestation_data_root=%s&slot=%d&committee_index=0" % (
            data_root, slot)
        return [
            ("attester", "POST", "/eth/v1/validator/duties/attester/%d" % (e + 1), IDX, None, (200,)),
            ("proposer_v1", "GET", "/eth/v1/validator/duties/proposer/%d" % e, None, None, (200,)),
            ("proposer_v2", "GET", "/eth/v2/validator/duties/proposer/%d" % e, None, None, (200,)),
            ("sync", "POST", "/eth/v1/validator/duties/sync/%d" % e, IDX, None, (200,)),
            ("ptc", "POST", "/eth/v1/validator/duties/ptc/%d" % e, IDX, None, (200,)),
            ("liveness", "POST", "/eth/v1/validator/liveness/%d" % e, IDX, None, (200, 503)),
            ("aggregate", "GET", agg, None, None, (200,)),
            ("aggregate_ssz", "GET", agg, None, {"Accept": "application/octet-stream"}, (200,)),
            ("contribution", "GET", "/eth/v1/validator/sync_committee_contribution?slot=%d&"
             "subcommittee_index=0&beacon_block_root=%s" % (head_slot, head), None, None, (200,)),
        ]

    # ---- tests --------------------------------------------------------------------------------

    def test_a_liveness_any_node_saw_it(self):
        # beaconmux must have watched the nodes since the epoch started
        started = self.sim.truth()["current_epoch"]
        self.wait_epoch_at_least(started + 1)
        t = self.sim.truth()
        e, slot = t["current_epoch"], t["current_slot"]
        st, _, raw, _ = get(self.sim.nodes[1], "/eth/v1/validator/attestation_data?slot=%d" % slot)
        self.assertEqual(st, 200)
        att = [{"committee_index": "0", "attester_index": "7", "data": json.loads(raw)["data"],
                "signature": "0x" + "00" * 96}]
        st, _, raw, _ = get(self.sim.nodes[1], "/eth/v2/beacon/pool/attestations",
                            {"Content-Type": "application/json", "Eth-Consensus-Version": "fulu"},
                            "POST", json.dumps(att).encode())
        self.assertEqual(st, 200, raw)
        body = json.dumps(["7", "8"]).encode()
        # only node 1 saw validator 7
        for i, expect in ((0, False), (1, True), (2, False)):
            st, _, raw, _ = get(self.sim.nodes[i], "/eth/v1/validator/liveness/%d" % e, None, "POST", body)
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(raw)["data"][0]["is_live"], expect)
        st, _, raw, dt = self.mux_req("POST", "/eth/v1/validator/liveness/%d" % e, body)
        self.assertEqual(st, 200, raw)
        self.assertEqual(json.loads(raw)["data"], [{"index": "7", "is_live": True},
                                                   {"index": "8", "is_live": False}])
        self.assertLess(dt, CLIENT_TIMEOUT_S)

    def test_b_liveness_503_after_restarts(self):
        # beaconmux restarts within the epoch: it cannot vouch for that epoch
        e = self.wait_early_in_epoch()
        old = type(self).mux
        self.assertEqual(old.stop(), 0, "\n".join(old.stderr()[-30:]))
        type(self).mux = self.start_mux()
        body = json.dumps(["7"]).encode()
        st, _, raw, _ = self.mux_req("POST", "/eth/v1/validator/liveness/%d" % e, body)
        self.assertEqual(st, 503, raw)
        self.assertIn("ready since the epoch started", json.loads(raw)["message"])
        # from the next epoch on it can
        self.wait_epoch_at_least(e + 1)
        st, _, raw, _ = self.mux_req("POST", "/eth/v1/validator/liveness/%d" % (e + 1), body)
        self.assertEqual(st, 200, raw)
        # every node restarts within the epoch: nobody can vouch
        e = self.wait_early_in_epoch()
        for i in range(3):
            self.sim.put_node(i, {"down": True})
        for i in range(3):
            self.mux.wait_state("n%d" % i, "unreachable", timeout=10)
        for i in range(3):
            self.sim.put_node(i, {"down": False})
        wait_for(lambda: "ready" in self.mux.node_states().values(), 15, what="a node ready again")
        st, _, raw, _ = self.mux_req("POST", "/eth/v1/validator/liveness/%d" % e, body)
        self.assertEqual(st, 503, raw)

    def test_c_aggregates_carry_the_most_bits(self):
        for i in range(3):
            self.mux.wait_state("n%d" % i, "ready", timeout=20)
        for _ in range(3):
            t = self.sim.truth()
            slot = t["current_slot"]
            st, _, raw, _ = get(self.sim.nodes[0], "/eth/v1/validator/attestation_data?slot=%d" % slot)
            root = att_data_root(json.loads(raw)["data"])
            head = t["head"]["root"]
            agg = ("/eth/v2/validator/aggregate_attestation?attestation_data_root=%s&slot=%d&"
                   "committee_index=0" % (root, slot))
            con = ("/eth/v1/validator/sync_committee_contribution?slot=%d&subcommittee_index=2&"
                   "beacon_block_root=%s" % (slot, head))
            per_node_agg, per_node_con = [], []
            for url in self.sim.nodes:
                st, _, raw, _ = get(url, agg)
                per_node_agg.append(bitlist_count(json.loads(raw)["data"]["aggregation_bits"]) if st == 200 else -1)
                st, _, raw, _ = get(url, con)
                per_node_con.append(bitvector_count(json.loads(raw)["data"]["aggregation_bits"]) if st == 200 else -1)
            st, h, raw, dt = self.mux_req("GET", agg)
            self.assertEqual(st, 200, raw)
            self.assertEqual(h.get("eth-consensus-version"), "fulu")
            self.assertEqual(bitlist_count(json.loads(raw)["data"]["aggregation_bits"]), max(per_node_agg),
                             per_node_agg)
            self.assertLess(dt, CLIENT_TIMEOUT_S)
            st, h, raw, _ = self.mux_req("GET", agg, headers={"Accept": "application/octet-stream"})
            self.assertEqual(st, 200)
            self.assertEqual(h["content-type"], "application/octet-stream")
            bits = raw[236:]  # Electra Attestation: the Bitlist after the fixed part
            self.assertEqual(sum(bin(x).count("1") for x in bits) - 1, max(per_node_agg))
            st, _, raw, _ = self.mux_req("GET", con)
            self.assertEqual(st, 200, raw)
            self.assertEqual(bitvector_count(json.loads(raw)["data"]["aggregation_bits"]), max(per_node_con),
                             per_node_con)
            self.sim.wait_slot(slot + 1)

    def test_d_duties_carry_the_canonical_dependent_root(self):
        self.wait_epoch_at_least(2)
        for i in range(3):
            self.mux.wait_state("n%d" % i, "ready", timeout=20)
        t = self.sim.truth()
        e = t["current_epoch"]
        cases = [("POST", "/eth/v1/validator/duties/attester/%d" % (e + 1), IDX, (e) * SPE - 1),
                 ("POST", "/eth/v1/validator/duties/attester/%d" % e, IDX, (e - 1) * SPE - 1),
                 ("GET", "/eth/v1/validator/duties/proposer/%d" % e, None, e * SPE - 1),
                 ("GET", "/eth/v2/validator/duties/proposer/%d" % e, None, (e - 1) * SPE - 1),
                 ("POST", "/eth/v1/validator/duties/ptc/%d" % (e + 1), IDX, e * SPE - 1)]
        for method, path, body, dep_slot in cases:
            st, _, raw, dt = self.mux_req(method, path, body)
            self.assertEqual(st, 200, (path, raw))
            ans = json.loads(raw)
            self.assertEqual(ans["dependent_root"], self.dependent_root(dep_slot), path)
            self.assertLess(dt, CLIENT_TIMEOUT_S)
            for url in self.sim.nodes:  # the nodes agree
                st, _, nraw, _ = get(url, path, None, method, body)
                self.assertEqual(json.loads(nraw)["dependent_root"], ans["dependent_root"], path)
        st, _, raw, _ = self.mux_req("POST", "/eth/v1/validator/duties/sync/%d" % e, IDX)
        self.assertEqual(st, 200)
        st, _, nraw, _ = get(self.sim.nodes[0], "/eth/v1/validator/duties/sync/%d" % e, None, "POST", IDX)
        self.assertEqual(json.loads(raw)["data"], json.loads(nraw)["data"])

    def test_e_forked_nodes_duties_are_not_served(self):
        for i in range(3):
            self.mux.wait_state("n%d" % i, "ready", timeout=20)
        e0 = self.wait_early_in_epoch()
        self.sim.put_node(2, {"fork": True})
        # from the next epoch, node 2's dependent root for the epoch after differs
        self.wait_epoch_at_least(e0 + 1)
        e = self.sim.truth()["current_epoch"]
        path = "/eth/v1/validator/duties/attester/%d" % (e + 1)
        canonical = self.dependent_root(e * SPE - 1)
        st, _, raw, _ = get(self.sim.nodes[2], path, None, "POST", IDX)
        self.assertNotEqual(json.loads(raw)["dependent_root"], canonical)
        # the honest nodes answer late, the forked one at once: its answer is still not served
        self.sim.put_node(0, {"slow": 300})
        self.sim.put_node(1, {"slow": 300})
        for _ in range(5):
            st, _, raw, _ = self.mux_req("POST", path, IDX)
            self.assertEqual(st, 200, raw)
            self.assertEqual(json.loads(raw)["dependent_root"], canonical)
        self.sim.put_node(0, {"slow": 0})
        self.sim.put_node(1, {"slow": 0})
        self.sim.put_node(2, {"fork": False})

    def test_f_every_duty_answered_with_one_node_left(self):
        modes = [("down", "hang"), ("hang", "down"), ("down", "hang")]
        for left in range(3):
            others = [i for i in range(3) if i != left]
            self.setUp()
            self.mux.wait_state("n%d" % left, "ready", timeout=25)
            reqs = self.all_duty_requests(left)
            for o, mode in zip(others, modes[left]):
                self.sim.put_node(o, {mode: True})
            for name, method, path, body, headers, ok in reqs:
                st, _, raw, dt = self.mux_req(method, path, body, headers)
                self.assertIn(st, ok, (left, name, raw))
                if st == 503:
                    self.assertIn("ready since the epoch started", json.loads(raw)["message"])
                self.assertLess(dt, CLIENT_TIMEOUT_S, (left, name))
                self.max_latency[name] = max(self.max_latency.get(name, 0), dt)
            # and again, once the others are known to be gone
            for name, method, path, body, headers, ok in reqs[:5]:
                st, _, raw, dt = self.mux_req(method, path, body, headers)
                self.assertEqual(st, 200, (left, name, raw))
                self.assertLess(dt, CLIENT_TIMEOUT_S, (left, name))
                self.max_latency[name] = max(self.max_latency.get(name, 0), dt)


if __name__ == "__main__":
    main()
