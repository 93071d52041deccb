# SPDX-License-Identifier: MIT
"""beaconmux in front of beaconsim: the whole system on loopback."""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import QUICK_NODES, Beaconmux, Beaconsim, main, wait_for  # noqa: E402

CONFIG = QUICK_NODES


class Cluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=3, slot_ms=1000, node_specs={
            0: "client=lighthouse", 1: "client=teku", 2: "client=prysm,lag=800"})
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u) for i, u in enumerate(cls.sim.nodes))
        cls.mux = Beaconmux(config_text=CONFIG + ups)
        for i in range(3):
            cls.mux.wait_state("n%d" % i, "ready")

    @classmethod
    def tearDownClass(cls):
        cls.mux.stop()
        cls.sim.stop()

    def setUp(self):
        for i in range(3):
            self.sim.put_node(i, {"down": False, "hang": False, "error_rate": 0})

    def test_discovery_sees_every_client(self):
        ups = {u["id"]: u for u in self.mux.status()["upstreams"]}
        self.assertEqual(ups["n0"]["client"], "lighthouse")
        self.assertEqual(ups["n1"]["client"], "teku")
        self.assertEqual(ups["n2"]["client"], "prysm")
        st, _, body = self.mux.request("GET", "/eth/v1/config/spec")
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(body)["data"]["SLOTS_PER_EPOCH"], "8")
        st, _, body = self.mux.request("GET", "/eth/v1/beacon/genesis")
        import urllib.request
        with urllib.request.urlopen(self.sim.nodes[0] + "/eth/v1/beacon/genesis") as r:
            self.assertEqual(body, r.read())  # verbatim
        self.assertEqual(self.mux.status()["chain"]["slots_per_epoch"], 8)

    def test_node_down_then_back(self):
        self.sim.put_node(0, {"down": True})
        self.mux.wait_state("n0", "unreachable", timeout=5)
        # reads still answered by the others
        st, _, body = self.mux.request("GET", "/eth/v1/beacon/headers/head")
        self.assertEqual(st, 200)
        self.sim.put_node(0, {"down": False})
        self.mux.wait_state("n0", "ready", timeout=8)

    def test_failover_over_hung_and_failing_nodes(self):
        self.sim.put_node(0, {"hang": True})
        self.sim.put_node(1, {"error_rate": 1})
        t0 = time.monotonic()
        st, _, body = self.mux.request("GET", "/eth/v1/beacon/states/head/finality_checkpoints")
        self.assertEqual(st, 200, body)
        self.assertIn("finalized", json.loads(body)["data"])
        self.assertLess(time.monotonic() - t0, 3.0)
        served = self.sim.requests(2)
        self.assertTrue(any("finality" in k.lower() for k in json.dumps(served).split('"')))

    def test_ssz_through_the_cluster(self):
        slot = self.sim.truth()["current_slot"]
        st, h, body = self.mux.request("GET", "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot,
                                       headers={"Accept": "application/octet-stream"})
        self.assertEqual(st, 200)
        self.assertEqual(h["content-type"], "application/octet-stream")
        self.assertEqual(len(body), 128)  # AttestationData
        self.assertEqual(int.from_bytes(body[0:8], "little"), slot)

    def test_status_reports_the_policies(self):
        before = self.mux.status()
        for key in ("events", "attestation_data", "block_production", "aggregates", "duties"):
            self.assertIn(key, before)
        slot = self.sim.truth()["current_slot"]
        st, _, _ = self.mux.request("GET", "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot)
        self.assertEqual(st, 200)
        after = self.mux.status()
        self.assertEqual(after["attestation_data"]["requests"], before["attestation_data"]["requests"] + 1)
        self.assertIn("cluster_head", after)


if __name__ == "__main__":
    main()
