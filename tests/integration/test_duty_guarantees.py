# SPDX-License-Identifier: MIT
"""The duty guarantees end to end (docs/duties.md): beaconsim's nodes behind beaconmux.

- Answer times (Bounds): with every node hung, with one hung and the others answering 500,
  and with one hung and the others down, every race-based route is answered by its bound,
  never by the race's 10 s hard timeout: a duty read (attestation data, head root,
  aggregates, contributions) at the later of maxHold and the duty's due time, a block
  production (v3 and the legacy v2 and blinded forms) at the later of the proposal deadline
  and maxHold, duties at dutiesMajorityAfter + 500 ms, liveness at 1.5 s, a write (pool,
  block publish, DVT selection) at writeTimeout. The duty reads and liveness answer a 503
  naming each node. Each answer time is measured
  and compared with the bound computed from the slot times of /sim/v1/truth; the table is
  printed.
- The legacy production forms (Legacy): GET /eth/v2/validator/blocks and
  GET /eth/v1/validator/blinded_blocks are served on the cluster head, and the blinded
  block's publish (legacy v1) reaches the node that produced it first.
- Checkpoint agreement (Checkpoints): a node whose attestation data names a wrong source or
  target (bad-source, bad-target) is fast; live mode serves it only before the nodes agreed
  on the epoch's checkpoints and counts the contradiction, strict mode never serves it.
- Indexed errors (Indexed): nodes that refuse different items of a batch, or call them
  duplicates (as Lodestar does), give the client a 200; an item every node refused is the
  only one in the 400.

Waits are bounded polls or waits for a point of a slot taken from the truth.
"""
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (QUICK_NODES, Beaconmux, Beaconsim, att_data_root, http_request,  # noqa: E402
                     main, now_ms, port_of, sleep_until, stop_all, upstreams_yaml, wait_for)

SLOT_MS = 1000
SPE = 4
MAX_HOLD_MS = 1000
PROPOSAL_MS = 500
MAJORITY_MS = 1000
LIVENESS_MS = 1500
WRITE_MS = 1500
EARLY_MS = 50   # an answer may not come sooner than its bound by more than this
LATE_MS = 600   # nor later (an ASan build on a shared 2-core machine)
CONFIG = QUICK_NODES + """duties:
  proposalDeadline: %dms
  writeTimeout: %dms
""" % (PROPOSAL_MS, WRITE_MS)
RANDAO = "0x" + "c0" + "00" * 95
IDX = json.dumps([str(i) for i in range(8)])
NORMAL = {"down": False, "hang": False, "error_rate": 0, "slow": 0, "bad_source": False,
          "bad_target": False, "fail_items": "", "dup_items": ""}


def start(config_extra="", nodes=3, node_specs=None):
    sim = Beaconsim(nodes=nodes, slot_ms=SLOT_MS, slots_per_epoch=SPE, node_specs=node_specs)
    mux = Beaconmux(config_text=CONFIG + config_extra + upstreams_yaml(sim.nodes))
    try:
        wait_ready(mux)
    except Exception:
        stop_all(mux, sim)
        raise
    return sim, mux


def wait_ready(mux, timeout=20):
    mux.wait_cluster_ready(timeout, what="a ready cluster with a head")


class Bounds(unittest.TestCase):
    """Every race-based route answers by its bound when no node can serve it."""

    @classmethod
    def setUpClass(cls):
        cls.sim, cls.mux = start()
        cls.table = []

    @classmethod
    def tearDownClass(cls):
        rc = stop_all(cls.mux, cls.sim)
        assert rc == 0, "beaconmux exited with %s:\n%s" % (rc, "\n".join(cls.mux.stderr()[-30:]))
        if cls.table:
            sys.stderr.write("\nanswer time - bound (ms), per case and route:\n")
            for case, rows in cls.table:
                sys.stderr.write("  %-12s %s\n" % (case, ", ".join(
                    "%s %d (%d ms, %d)" % (n, d, took, st) for n, d, took, st in rows)))

    def routes(self):
        """(name, method, path, body, headers, bound(t_ms), duty read?) for the current slot,
        built while every node still answers."""
        t = self.sim.truth()
        slot, epoch = t["current_slot"], t["current_epoch"]
        cur, nxt = self.sim.truth(slot), self.sim.truth(slot + 1)
        st, _, raw = http_request(port_of(self.sim.nodes[0]),
                                  "GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
        self.assertEqual(st, 200, raw)
        data = json.loads(raw)["data"]
        head = t["head"]["root"]
        agg = ("/eth/v2/validator/aggregate_attestation?attestation_data_root=%s&slot=%d&"
               "committee_index=0" % (att_data_root(data), slot))
        con = ("/eth/v1/validator/sync_committee_contribution?slot=%d&subcommittee_index=0&"
               "beacon_block_root=%s" % (slot, head))

        def duty(due):
            return lambda t0: max(t0 + MAX_HOLD_MS, due)

        def production(t0):
            return max(nxt["start_ms"] + PROPOSAL_MS, t0 + MAX_HOLD_MS)

        att = [{"committee_index": "0", "attester_index": "7", "data": data,
                "signature": "0x" + "00" * 96}]
        js = {"Content-Type": "application/json"}
        return [
            ("attestation_data", "GET", "/eth/v1/validator/attestation_data?slot=%d" % slot, None,
             None, duty(cur["attestation_due_ms"]), True),
            ("head_root", "GET", "/eth/v1/beacon/blocks/head/root", None, None,
             duty(cur["sync_message_due_ms"]), True),
            ("aggregate", "GET", agg, None, None, duty(cur["aggregate_due_ms"]), True),
            ("contribution", "GET", con, None, None, duty(cur["contribution_due_ms"]), True),
            ("produce_v3", "GET", "/eth/v3/validator/blocks/%d?randao_reveal=%s" % (slot + 1, RANDAO),
             None, None, production, True),
            ("produce_v2", "GET", "/eth/v2/validator/blocks/%d?randao_reveal=%s" % (slot + 1, RANDAO),
             None, None, production, True),
            ("produce_blinded", "GET", "/eth/v1/validator/blinded_blocks/%d?randao_reveal=%s"
             % (slot + 1, RANDAO), None, None, production, True),
            ("attester", "POST", "/eth/v1/validator/duties/attester/%d" % (epoch + 1), IDX, js,
             lambda t0: t0 + MAJORITY_MS + 500, True),
            ("proposer_v2", "GET", "/eth/v2/validator/duties/proposer/%d" % epoch, None, None,
             lambda t0: t0 + MAJORITY_MS + 500, True),
            ("sync", "POST", "/eth/v1/validator/duties/sync/%d" % epoch, IDX, js,
             lambda t0: t0 + MAJORITY_MS + 500, True),
            ("liveness", "POST", "/eth/v1/validator/liveness/%d" % epoch, IDX, js,
             lambda t0: t0 + LIVENESS_MS, True),
            ("pool_attestations", "POST", "/eth/v2/beacon/pool/attestations", json.dumps(att),
             {"Content-Type": "application/json", "Eth-Consensus-Version": "fulu"},
             lambda t0: t0 + WRITE_MS, False),
            ("publish_block", "POST", "/eth/v2/beacon/blocks", "{}",
             {"Content-Type": "application/json", "Eth-Consensus-Version": "fulu"},
             lambda t0: t0 + WRITE_MS, False),
            ("selections", "POST", "/eth/v1/validator/beacon_committee_selections", "[]", js,
             lambda t0: t0 + WRITE_MS, False),
        ]

    def run_case(self, case, behaviours):
        wait_ready(self.mux)
        routes = self.routes()
        for i, b in enumerate(behaviours):
            self.sim.put_node(i, b)
        results = {}

        def one(r):
            name, method, path, body, headers, bound, _ = r
            t0 = now_ms()
            st, _, raw = http_request(self.mux.port, method, path,
                                      body.encode() if body else None, headers, timeout=15)
            results[name] = (st, raw, t0, now_ms())

        threads = [threading.Thread(target=one, args=(r,)) for r in routes]
        for th in threads:
            th.start()
        for th in threads:
            th.join(20)
        for i in range(len(behaviours)):
            self.sim.put_node(i, NORMAL)
        rows = []
        for name, _, _, _, _, bound, duty_read in routes:
            self.assertIn(name, results, "%s: %s got no answer" % (case, name))
            st, raw, t0, t1 = results[name]
            want = bound(t0)
            rows.append((name, t1 - want, t1 - t0, st))
            self.assertGreaterEqual(t1, want - EARLY_MS, "%s %s: answered %d ms before its bound"
                                    % (case, name, want - t1))
            self.assertLessEqual(t1, want + LATE_MS, "%s %s: answered %d ms after its bound: %s"
                                 % (case, name, t1 - want, raw[:300]))
            self.assertGreaterEqual(st, 500, "%s %s: %d %s" % (case, name, st, raw[:200]))
            if duty_read:
                # a 503 naming each candidate's failure: the hung node always; the others
                # unless health had already left them out (a down node is seen at once)
                self.assertEqual(st, 503, "%s %s: %s" % (case, name, raw[:300]))
                msg = json.loads(raw)["message"]
                self.assertIn("n0: ", msg, "%s %s: %s" % (case, name, msg))
                if "down" not in case:
                    for n in ("n1: ", "n2: "):
                        self.assertIn(n, msg, "%s %s: %s" % (case, name, msg))
        type(self).table.append((case, rows))

    def test_all_hung(self):
        self.run_case("all hung", [{"hang": True}] * 3)

    def test_hung_and_5xx(self):
        self.run_case("hung + 5xx", [{"hang": True}, {"error_rate": 1}, {"error_rate": 1}])

    def test_hung_and_down(self):
        self.run_case("hung + down", [{"hang": True}, {"down": True}, {"down": True}])


class Legacy(unittest.TestCase):
    """The legacy production forms race like v3 and remember the producer."""

    def test_legacy_production_and_publish(self):
        sim, mux = start()
        try:
            # n0 stops importing: it misses the block of slot - 1, so its block for `slot` is
            # on a stale parent; n1 and n2 are on time
            sim.put_node(0, {"stale": True})
            slot = sim.truth()["current_slot"] + 2
            sleep_until(sim.truth(slot)["start_ms"] - 400)
            wait_for(lambda: int(mux.status()["cluster_head"]["slot"]) >= slot - 1, 2,
                     what="the head of slot %d" % (slot - 1))
            parent = sim.truth(slot - 1)["block_root_at_slot"]
            for form in ("/eth/v2/validator/blocks/%d", "/eth/v1/validator/blinded_blocks/%d"):
                t0 = time.monotonic()
                st, h, raw = mux.request("GET", (form % slot) + "?randao_reveal=" + RANDAO)
                took = time.monotonic() - t0
                self.assertEqual(st, 200, raw)
                self.assertEqual(h.get("eth-consensus-version"), "fulu")
                data = json.loads(raw)["data"]
                block = data.get("block", data)
                self.assertEqual(block["parent_root"], parent, form)
                self.assertLess(took, 0.5, form)
            # the blinded block served came from one node (each node's state_root differs):
            # its publish goes there first
            blinded = json.loads(raw)["data"]
            producer = None
            for i in range(3):
                st, _, own = http_request(port_of(sim.nodes[i]), "GET",
                                          "/eth/v1/validator/blinded_blocks/%d?randao_reveal=%s"
                                          % (slot, RANDAO))
                if st == 200 and json.loads(own)["data"]["state_root"] == blinded["state_root"]:
                    producer = i
            self.assertIn(producer, (1, 2))
            # every node answers 200 ms late (beaconsim records a request once it acts on it):
            # the producer's answer gates the others, so they record it 200 ms after it
            for i in range(3):
                sim.put_node(i, {"slow": 200})
            seq = [sim.submissions(i)["last_seq"] for i in range(3)]
            body = json.dumps({"message": blinded, "signature": "0x" + "00" * 96}).encode()
            st, _, raw = mux.request("POST", "/eth/v1/beacon/blinded_blocks", body,
                                     {"Content-Type": "application/json"})
            self.assertIn(st, (200, 202, 400), raw)  # a node's verdict on the sim's block

            def arrivals():
                got = []
                for i in range(3):
                    s = [x for x in sim.submissions(i, seq[i])["data"] if x["route"] == "publishBlindedBlock"]
                    if not s:
                        return None
                    got.append(s[0]["time_ms"])
                return got
            times = wait_for(arrivals, 5, what="the blinded block at every node")
            others = [times[i] for i in range(3) if i != producer]
            # the others get it once the producer answered
            self.assertGreaterEqual(min(others), times[producer] + 150, times)
            self.assertGreaterEqual(mux.status()["broadcast"]["producer_first"], 1)
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)


class Checkpoints(unittest.TestCase):
    """A node that reports a wrong justified checkpoint (source) or target."""

    def serve_slots(self, sim, mux, n):
        """Asks attestation data of the next `n` slots, 400 ms into each (after the block);
        returns (slot, data) pairs."""
        out = []
        for _ in range(n):
            slot = sim.truth()["current_slot"] + 1
            sleep_until(sim.truth(slot)["start_ms"] + 400)
            st, _, raw = mux.request("GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
            self.assertEqual(st, 200, raw)
            out.append((slot, json.loads(raw)["data"]))
        return out

    def good_checkpoints(self, sim, slot):
        st, _, raw = http_request(port_of(sim.nodes[0]), "GET",
                                  "/eth/v1/validator/attestation_data?slot=%d" % slot)
        d = json.loads(raw)["data"]
        return d["source"], d["target"]

    def test_live(self):
        # n2 answers first (the others are 50 ms slow) with a wrong source
        sim, mux = start(node_specs={0: "slow=50", 1: "slow=50", 2: "bad-source"})
        try:
            served = self.serve_slots(sim, mux, 2 * SPE)
            bad = [s for s, d in served if (d["source"], d["target"]) != self.good_checkpoints(sim, s)]
            st = mux.status()["attestation_data"]
            # the wrong source only before the nodes agreed on that epoch's checkpoints: at
            # most the first answer of each epoch, and every such answer counted
            epochs = {s // SPE for s, _ in served}
            self.assertLessEqual(len(bad), len(epochs), bad)
            self.assertEqual(st["checkpoint_disagreements"], len(bad), st)
            self.assertGreater(st["checkpoint_refused"], 0, st)
            # a wrong target too, from the same fast node
            sim.put_node(2, {"bad_source": False, "bad_target": True})
            for s, d in self.serve_slots(sim, mux, SPE):
                if s % SPE:  # after the epoch's first answer the agreement is known
                    self.assertEqual((d["source"], d["target"]), self.good_checkpoints(sim, s), s)
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)

    def test_strict(self):
        sim, mux = start("  checkpointMode: strict\n",  # in CONFIG's duties section
                         node_specs={0: "slow=50", 1: "slow=50", 2: "bad-target"})
        try:
            for s, d in self.serve_slots(sim, mux, SPE + 1):
                self.assertEqual((d["source"], d["target"]), self.good_checkpoints(sim, s), s)
            # with a quorum no answer reaches (n0 hung: one good answer, one bad), nothing is
            # served: a 503 names each node
            sim.put_node(0, {"hang": True})
            slot = sim.truth()["current_slot"] + 1
            sleep_until(sim.truth(slot)["start_ms"] + 400)
            st, _, raw = mux.request("GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
            self.assertEqual(st, 503, raw)
            self.assertIn("n2: 200, not usable", json.loads(raw)["message"])
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)


class Indexed(unittest.TestCase):
    """Batches refused item by item: the nodes' indexed errors merged."""

    def test_merge(self):
        sim, mux = start()
        try:
            msgs = json.dumps([{"slot": "1", "beacon_block_root": "0x" + "11" * 32,
                                "validator_index": str(i), "signature": "0x00"} for i in range(4)])
            path = "/eth/v1/beacon/pool/sync_committees"
            js = {"Content-Type": "application/json"}
            # every node calls some items duplicates (a real Lodestar's 500): 200
            for i, items in enumerate(("0+1", "2", "1+3")):
                sim.put_node(i, {"dup_items": items})
            st, _, raw = mux.request("POST", path, msgs.encode(), js)
            self.assertEqual(st, 200, raw)
            self.assertEqual(raw, b"")
            # each node refuses other items: each was taken somewhere, 200
            for i, items in enumerate(("0", "1", "2")):
                sim.put_node(i, {"dup_items": "", "fail_items": items})
            st, _, raw = mux.request("POST", path, msgs.encode(), js)
            self.assertEqual(st, 200, raw)
            # item 3 refused by every node: the 400 lists only it, with each node's word
            for i, items in enumerate(("0+3", "3", "1+3")):
                sim.put_node(i, {"fail_items": items})
            st, _, raw = mux.request("POST", path, msgs.encode(), js)
            self.assertEqual(st, 400, raw)
            body = json.loads(raw)
            self.assertEqual([f["index"] for f in body["failures"]], [3], body)
            for n in ("n0: ", "n1: ", "n2: "):
                self.assertIn(n, body["failures"][0]["message"])
            self.assertGreaterEqual(mux.status()["broadcast"]["indexed_merged"], 3)
            for i in range(3):
                sim.put_node(i, NORMAL)
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    main()
