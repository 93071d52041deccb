# SPDX-License-Identifier: MIT
"""The fresh-head policies end to end: beaconsim's nodes behind beaconmux, every vote and
every block scored against /sim/v1/truth.

- The seed scenario: node A imports every block past the attestation due time, B and C on
  time. A client acting like a validator client asks for attestation data when the
  cluster head event for the slot arrives, or at the due time, whichever comes first.
  Through beaconmux every answer carries the slot's canonical root; the same client
  pointed straight at A shows the loss beaconmux prevents. Both rates are printed.
- All nodes but one down or hung, each of the three in turn: attestation data, the head
  root and a block are answered before a validator client would give up.
- A late head re-orged by the next proposer: the block built on the head's parent is
  served at once. Two blocks offered, one on a stale parent: the fresh one is served.
- Block values above 2^63 / 2^64 Wei (big-values) with blockSelection best-value: the
  most valuable block is served, compared as integers.
- Gloas (beaconsim --fork gloas): the attestation index (payload status) and the payload
  attestation data rules.

Waits are bounded polls or waits for a point of a slot taken from the truth; nothing
sleeps in place of a condition.
"""
import http.client
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (QUICK_NODES, Beaconmux, Beaconsim, http_request, main, now_ms,  # noqa: E402
                     port_of, sleep_until, stop_all, upstreams_yaml, wait_for)

SLOT_MS = 1000
SEED_SLOTS = 12
CLIENT_TIMEOUT_S = 1.0  # what a validator client would wait at most here (Vero: 0.5 s of a 12 s slot)
CONFIG = QUICK_NODES
NORMAL = {"lag": 0, "jitter": 0, "slow": 0, "down": False, "hang": False, "stale": False,
          "big_values": False}
RANDAO = "0x" + "c0" + "00" * 95

def get_json(port, path, timeout=10.0):
    t0 = time.monotonic()
    st, h, body = http_request(port, "GET", path, timeout=timeout)
    return st, h, (json.loads(body) if body and h.get("content-type", "").startswith("application/json") else body), time.monotonic() - t0


class HeadWatcher(threading.Thread):
    """Follows GET /eth/v1/events?topics=head of one server and records each slot's first
    head event. A stream that fails or ends just stops (the client then asks at the due
    time)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.slots = {}
        self.lock = threading.Lock()
        self.conn = None
        self.resp = None
        self.stopped = False
        self.start()

    def run(self):
        try:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.conn.request("GET", "/eth/v1/events?topics=head", headers={"Accept": "text/event-stream"})
            r = self.conn.getresponse()
            self.resp = r
            if r.status != 200:
                return
            while not self.stopped:
                line = r.fp.readline()
                if not line:
                    return
                line = line.decode("utf-8", "replace").strip()
                if line.startswith("data:"):
                    try:
                        slot = int(json.loads(line[5:])["slot"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    with self.lock:
                        self.slots.setdefault(slot, now_ms())
        except (OSError, http.client.HTTPException):
            return

    def seen(self, slot):
        with self.lock:
            return any(s >= slot for s in self.slots)

    def stop(self):
        self.stopped = True
        try:
            if self.conn:
                self.conn.close()
            if self.resp:
                self.resp.close()
        except (OSError, http.client.HTTPException):
            pass


class ValidatorClient(threading.Thread):
    """Asks one server for attestation data of each slot when a head event for the slot
    arrives or at the attestation due time, whichever first (VALIDATOR-FLOWS.md §4)."""

    def __init__(self, sim, port, slots):
        super().__init__(daemon=True)
        self.sim, self.port, self.slots = sim, port, slots
        self.votes = {}  # slot -> (root, asked_ms, why, latency_s)
        self.watcher = HeadWatcher(port)
        self.start()

    def run(self):
        try:
            for s in self.slots:
                due = self.sim.truth(s)["attestation_due_ms"]
                while now_ms() < due and not self.watcher.seen(s):
                    time.sleep(0.002)
                why = "head" if self.watcher.seen(s) else "due"
                asked = now_ms()
                st, _, body, took = get_json(self.port, "/eth/v1/validator/attestation_data?slot=%d" % s)
                root = body["data"]["beacon_block_root"] if st == 200 else None
                self.votes[s] = (root, asked, why, took)
        finally:
            self.watcher.stop()


class Fresh(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8)
        cls.mux = Beaconmux(config_text=CONFIG + upstreams_yaml(cls.sim.nodes))
        try:
            cls.wait_ready(cls.mux)
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        rc = stop_all(cls.mux, cls.sim)
        assert rc == 0, "beaconmux exited with %s:\n%s" % (rc, "\n".join(cls.mux.stderr()[-30:]))

    @staticmethod
    def wait_ready(mux, timeout=15):
        mux.wait_cluster_ready(timeout, what="a ready cluster with a head")

    def setUp(self):
        for i in range(3):
            self.sim.put_node(i, NORMAL)
        self.wait_ready(self.mux)

    def canonical(self, slot):
        return self.sim.truth(slot)["block_root_at_slot"]

    def cluster_slot(self):
        h = self.mux.status().get("cluster_head")
        return int(h["slot"]) if h else -1

    # ---- the seed scenario ---------------------------------------------------------------

    def test_seed_scenario(self):
        # A (n0) imports every block 600 ms after its slot starts: past the due time (333 ms)
        self.sim.put_node(0, {"lag": 600})
        first = self.sim.truth()["current_slot"] + 2
        slots = list(range(first, first + SEED_SLOTS))
        through = ValidatorClient(self.sim, self.mux.port, slots)
        direct = ValidatorClient(self.sim, port_of(self.sim.nodes[0]), slots)
        bound = (SEED_SLOTS + 4) * SLOT_MS / 1000.0
        through.join(bound)
        direct.join(bound)
        self.assertFalse(through.is_alive() or direct.is_alive(), "clients did not finish")

        def rate(vc):
            ok = sum(1 for s in slots if vc.votes.get(s, (None,))[0] == self.canonical(s))
            return ok, 100.0 * ok / len(slots)

        ok_mux, pct_mux = rate(through)
        ok_a, pct_a = rate(direct)
        asked_on_head = sum(1 for v in through.votes.values() if v[2] == "head")
        lat = sorted(v[3] for v in through.votes.values())
        print("\nseed scenario over %d slots (A lags 600 ms, due at 333 ms): correct head votes "
              "through beaconmux %d/%d (%.0f%%), straight to A %d/%d (%.0f%%); asked on a head "
              "event %d times; beaconmux latency p50 %.0f ms, max %.0f ms"
              % (len(slots), ok_mux, len(slots), pct_mux, ok_a, len(slots), pct_a, asked_on_head,
                 1000 * lat[len(lat) // 2], 1000 * lat[-1]), file=sys.stderr)
        for s in slots:
            self.assertEqual(through.votes[s][0], self.canonical(s),
                             "slot %d: %s" % (s, through.votes[s]))
        # the loss beaconmux prevents: A alone votes for the previous block every slot
        self.assertLess(ok_a, len(slots) // 2)

    # ---- nodes down or hung -----------------------------------------------------------------

    def duty_reads(self, label):
        """attestation data, head root and a block for the next slot, each in time."""
        slot = self.sim.truth()["current_slot"]
        st, _, body, took = get_json(self.mux.port, "/eth/v1/validator/attestation_data?slot=%d" % slot)
        self.assertEqual(st, 200, (label, body))
        self.assertLess(took, CLIENT_TIMEOUT_S, label)
        st, _, body, took = get_json(self.mux.port, "/eth/v1/beacon/blocks/head/root")
        self.assertEqual(st, 200, (label, body))
        self.assertLess(took, CLIENT_TIMEOUT_S, label)
        st, _, body, took = get_json(self.mux.port, "/eth/v3/validator/blocks/%d?randao_reveal=%s"
                                     % (slot + 1, RANDAO))
        self.assertEqual(st, 200, (label, body))
        self.assertLess(took, CLIENT_TIMEOUT_S, label)
        self.assertEqual(body["data"]["block"]["parent_root"], self.canonical(slot), label)

    def test_all_but_one_down_or_hung(self):
        for alive in range(3):
            down, hung = (alive + 1) % 3, (alive + 2) % 3
            self.sim.put_node(down, {"down": True})
            self.sim.put_node(hung, {"hang": True})
            # at once, while beaconmux still counts them ready
            self.duty_reads("n%d alone, at once" % alive)
            # and once health saw the down node go
            self.mux.wait_state("n%d" % down, "unreachable", timeout=6)
            self.duty_reads("n%d alone, later" % alive)
            self.sim.put_node(down, {"down": False})
            self.sim.put_node(hung, {"hang": False})
            self.wait_ready(self.mux, timeout=20)

    # ---- block production ------------------------------------------------------------------

    def test_late_head_reorged_by_proposer(self):
        s = self.sim.truth()["current_slot"] + 2
        self.sim.scenario({"type": "late-block", "slot": s})
        t = self.sim.truth(s + 1)
        sleep_until(t["start_ms"] + 30)
        wait_for(lambda: self.cluster_slot() >= s, 2, what="the late block as the cluster head")
        st, _, body, took = get_json(self.mux.port, "/eth/v3/validator/blocks/%d?randao_reveal=%s"
                                     % (s + 1, RANDAO))
        self.assertEqual(st, 200, body)
        parent = body["data"]["block"]["parent_root"]
        truth = self.sim.truth(s + 1)
        self.assertTrue(self.sim.truth(s)["late"])
        self.assertEqual(parent, truth["parent_root"])  # the late block's parent
        self.assertNotEqual(parent, self.sim.truth(s)["root"])
        # accepted at once, not served as a fallback at the proposal deadline (2 s)
        self.assertLess(took, 0.8)

    def test_stale_parent_loses(self):
        # A (n0) is fast but stops importing just before slot p - 1; B and C are 150 ms slower
        p = self.sim.truth()["current_slot"] + 3
        sleep_until(self.sim.truth(p - 1)["start_ms"] - 150)
        self.sim.put_node(0, {"stale": True})
        self.sim.put_node(1, {"slow": 150})
        self.sim.put_node(2, {"slow": 150})
        sleep_until(self.sim.truth(p)["start_ms"] + 30)
        wait_for(lambda: self.cluster_slot() >= p - 1, 2, what="block p-1 as the cluster head")
        # A, asked straight, offers a block on the stale parent
        st, _, stale, _ = get_json(port_of(self.sim.nodes[0]),
                                   "/eth/v3/validator/blocks/%d?randao_reveal=%s" % (p, RANDAO))
        self.assertEqual(st, 200)
        self.assertNotEqual(stale["data"]["block"]["parent_root"], self.canonical(p - 1))
        st, _, body, took = get_json(self.mux.port, "/eth/v3/validator/blocks/%d?randao_reveal=%s"
                                     % (p, RANDAO))
        self.assertEqual(st, 200, body)
        self.assertEqual(body["data"]["block"]["parent_root"], self.canonical(p - 1))
        self.assertLess(took, CLIENT_TIMEOUT_S)


class BestValue(unittest.TestCase):
    """blockSelection: best-value over nodes whose block values exceed 2^63 and 2^64 Wei."""

    def test_big_values(self):
        sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8)
        mux = Beaconmux(config_text=CONFIG + "duties:\n  blockSelection: best-value\n"
                        "  bestValueGrace: 300ms\n" + upstreams_yaml(sim.nodes))
        try:
            Fresh.wait_ready(mux)
            sim.scenario({"type": "big-values", "enabled": True})
            served = []
            for _ in range(3):
                slot = sim.truth()["current_slot"] + 1
                path = "/eth/v3/validator/blocks/%d?randao_reveal=%s" % (slot, RANDAO)
                values = []
                for i, u in enumerate(sim.nodes):
                    st, h, body, _ = get_json(port_of(u), path)
                    self.assertEqual(st, 200)
                    v = int(h["eth-consensus-block-value"]) + int(h["eth-execution-payload-value"])
                    values.append(v)
                # the richest block comes last (the first would be another's)
                richest = values.index(max(values))
                sim.put_node(richest, {"slow": 150})
                st, h, body, _ = get_json(mux.port, path)
                sim.put_node(richest, {"slow": 0})
                self.assertEqual(st, 200, body)
                got = int(h["eth-consensus-block-value"]) + int(h["eth-execution-payload-value"])
                self.assertGreater(int(h["eth-execution-payload-value"]), 2 ** 64)
                self.assertGreater(int(h["eth-consensus-block-value"]), 2 ** 63)
                self.assertEqual(got, max(values), (values, got))
                served.append((slot, got, sorted(values)))
                sim.wait_slot(slot)
            print("\nbest value served (slot, value, all three): %s" % served, file=sys.stderr)
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)


class Gloas(unittest.TestCase):
    """beaconsim --fork gloas: attestation `index` is the payload status; payload
    attestation data holds until the slot's block is there, a 200 beating a 204."""

    def test_index_and_payload_attestation(self):
        # every node imports 300 ms into the slot; the payload follows 100 ms later
        spec = "lag=300,payload-delay=100"
        sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8, args=("--fork", "gloas"),
                        node_specs={0: spec, 1: spec, 2: spec})
        mux = Beaconmux(config_text=CONFIG + upstreams_yaml(sim.nodes))
        try:
            Fresh.wait_ready(mux)
            sim.wait_slot(3)  # past genesis: slot s - 1 has a block with a payload
            for _ in range(2):
                s = sim.truth()["current_slot"] + 1
                t = sim.truth(s)
                # before the block of s: the head is s-1, its payload full -> index 1
                sleep_until(t["start_ms"] + 50)
                st, _, body, took = get_json(mux.port, "/eth/v1/validator/attestation_data?slot=%d" % s)
                self.assertEqual(st, 200, body)
                self.assertEqual(body["data"]["beacon_block_root"], sim.truth(s - 1)["root"],
                                 (s, took, mux.status()["cluster_head"]))
                self.assertEqual(body["data"]["index"], "1")
                # once the block of s is there: index 0
                sleep_until(t["start_ms"] + 500)
                wait_for(lambda: int(mux.status()["cluster_head"]["slot"]) >= s, 1,
                         what="block %d as the cluster head" % s)
                st, _, body, _ = get_json(mux.port, "/eth/v1/validator/attestation_data?slot=%d" % s)
                self.assertEqual(body["data"]["beacon_block_root"], t["root"])
                self.assertEqual(body["data"]["index"], "0")
                # payload attestation data for s+1 asked before its block: the nodes say
                # 204, the race holds, and the 200 that comes with the block wins
                sleep_until(sim.truth(s + 1)["start_ms"] + 50)
                st, _, body, took = get_json(mux.port, "/eth/v1/validator/payload_attestation_data?slot=%d" % (s + 1))
                self.assertEqual(st, 200, body)
                self.assertEqual(body["data"]["beacon_block_root"], sim.truth(s + 1)["root"])
                self.assertGreater(took, 0.15)
                # after the payload: payload_present (awaited until slot s + 2 starts)
                end = sim.truth(s + 2)["start_ms"]

                def payload_present():
                    st, _, body, _ = get_json(mux.port, "/eth/v1/validator/payload_attestation_data?slot=%d" % (s + 1))
                    return st == 200 and body["data"]["payload_present"]

                wait_for(payload_present, max(0.0, (end - now_ms()) / 1000.0),
                         interval=0.05, what="payload_present for slot %d" % (s + 1))
                # a block for s + 2 through v4, on the head
                st, _, body, _ = get_json(mux.port, "/eth/v4/validator/blocks/%d?randao_reveal=%s&include_payload=false"
                                          % (s + 2, RANDAO))
                self.assertEqual(st, 200, body)
                self.assertEqual(body["data"]["parent_root"], sim.truth(s + 1)["root"])
        finally:
            rc = stop_all(mux, sim)
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    main()
