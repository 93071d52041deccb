# SPDX-License-Identifier: MIT
"""A shadow node (issue 14, item 3): `upstreams[].shadow: true`.

beaconsim runs the serving nodes and one shadow node; every vote is scored against
/sim/v1/truth, and the shadow's own answer is read straight from it at the same moment.

- A shadow that lags (it imports every block after the attestation due time): beaconmux
  serves the slot's block, the shadow (asked directly) answers the previous one, and the
  status page scores it `behind` and never fresh in time; it was asked exactly once per
  race; a write reaches the serving nodes only (no write, no replay to a shadow).
- A shadow that forks: it is `forked`, its answers are scored `other`, nothing of its branch
  reaches a client (attestation data, the cluster event stream), the cluster head is the
  truth's.
- A shadow counts for nothing: with two serving nodes and a shadow the head quorum is 1; with
  both serving nodes down, /healthz and /eth/v1/node/health say 503 and ordinary reads and
  duty reads fail, although the shadow is up, ready, and answers every mirrored read.

Waits are bounded polls or waits for a point of a slot taken from the truth.
"""
import json
import os
import re
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Beaconmux, Beaconsim, http_request, main, now_ms,  # noqa: E402
                     sleep_until, wait_for)

SLOT_MS = 2000

CONFIG = """
discovery:
  retryInterval: 200ms
"""

FEE = "0x" + "ab" * 20


def config(nodes, shadow):
    """The upstreams n0.. with node `shadow` a shadow."""
    up = "".join("  - id: n%d\n    url: %s\n%s" % (i, u, "    shadow: true\n" if i == shadow else "")
                 for i, u in enumerate(nodes))
    return CONFIG + "upstreams:\n" + up


def shadow_of(mux, nid):
    return {n["id"]: n for n in mux.status()["shadow"]["nodes"]}[nid]


def node_port(url):
    return int(url.rsplit(":", 1)[1])


def att_root(port, slot):
    code, _, body = http_request(port, "GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
    return json.loads(body)["data"]["beacon_block_root"] if code == 200 else code


def read_stream(port, seconds):
    """The roots ("block" fields) of the cluster stream's head and block events for a while."""
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    s.sendall(b"GET /eth/v1/events?topics=head,block HTTP/1.1\r\nHost: x\r\n"
              b"Accept: text/event-stream\r\n\r\n")
    end, raw = time.monotonic() + seconds, b""
    while time.monotonic() < end:
        s.settimeout(max(0.05, end - time.monotonic()))
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        if not data:
            break
        raw += data
    s.close()
    return set(re.findall(r'"block":"(0x[0-9a-f]{64})"', raw.decode("latin-1")))


class LaggingShadow(unittest.TestCase):
    def test_lagging_shadow_scored_behind_and_never_served(self):
        # the shadow imports every block 1.2 s into the slot: after the due time (2/3 s)
        sim = Beaconsim(nodes=4, slot_ms=SLOT_MS, slots_per_epoch=8, node_specs={3: "lag=1200"})
        mux = Beaconmux(config_text=config(sim.nodes, 3))
        try:
            mux.wait_cluster_ready(15, what="three ready nodes", serving_only=True)
            self.assertTrue(mux.upstreams()["n3"]["shadow"])
            self.assertNotIn("shadow", mux.upstreams()["n0"])
            for i in range(4):
                sim.clear_requests(i)
            first = sim.truth()["current_slot"] + 1
            slots = list(range(first, first + 4))
            served, direct = {}, {}
            for s in slots:
                sleep_until(sim.truth(s)["attestation_due_ms"])
                served[s] = att_root(mux.port, s)
                direct[s] = att_root(node_port(sim.nodes[3]), s)  # what the shadow answers
            truth = {s: sim.truth(s)["block_root_at_slot"] for s in slots}
            prev = {s: sim.truth(s - 1)["block_root_at_slot"] for s in slots}
            wait_for(lambda: shadow_of(mux, "n3")["compared"] >= len(slots), 5,
                     what="every mirrored read scored")
            sh = shadow_of(mux, "n3")
            print("\nlagging shadow: served %d/%d on the slot's block; the shadow itself %d/%d "
                  "(its answers on the previous block: %d); scored %s"
                  % (sum(served[s] == truth[s] for s in slots), len(slots),
                     sum(direct[s] == truth[s] for s in slots), len(slots),
                     sum(direct[s] == prev[s] for s in slots),
                     {k: sh[k] for k in ("mirrored", "compared", "agreed", "behind", "other",
                                         "in_time", "fresh_in_time", "latency_ms")}),
                  file=sys.stderr)
            for s in slots:
                self.assertEqual(served[s], truth[s], "served at slot %d" % s)
                self.assertEqual(direct[s], prev[s], "the shadow at slot %d" % s)
            self.assertEqual(sh["mirrored"], len(slots))
            self.assertEqual(sh["compared"], len(slots))
            self.assertEqual(sh["behind"], len(slots))
            self.assertEqual(sh["agreed"] + sh["in_time"] + sh["other"], 0, sh)
            self.assertEqual(sh["fresh_in_time"], 0)
            self.assertEqual(sh["checkpoints"]["agreed"], sh["checkpoints"]["compared"])
            # asked once per race by beaconmux, once more by this test: never re-asked
            counts = sim.requests(3)["data"]
            self.assertEqual(counts.get("produceAttestationData", 0), 2 * len(slots), counts)
            # a write reaches the serving nodes only, and nothing is replayed to the shadow
            prep = [{"validator_index": "7", "fee_recipient": FEE}]
            code, _, _ = mux.request("POST", "/eth/v1/validator/prepare_beacon_proposer",
                                     json.dumps(prep).encode(),
                                     {"Content-Type": "application/json"})
            self.assertEqual(code, 200)
            wait_for(lambda: all(sim.submissions(i)["data"] for i in range(3)), 5,
                     what="the preparation on every serving node")
            self.assertEqual(sim.submissions(3)["data"], [])
        finally:
            rc = mux.stop()
            sim.stop()
        self.assertEqual(rc, 0)


class ForkedShadow(unittest.TestCase):
    def test_forked_shadow_scored_other_and_never_heard(self):
        sim = Beaconsim(nodes=4, slot_ms=SLOT_MS, slots_per_epoch=8)
        mux = Beaconmux(config_text=config(sim.nodes, 3))
        try:
            mux.wait_cluster_ready(15, what="four ready nodes")
            sim.put_node(3, {"fork": True})
            wait_for(lambda: mux.upstreams()["n3"]["state"] == "forked", 4 * SLOT_MS / 1000.0,
                     what="the shadow forked")
            first = sim.truth()["current_slot"] + 1
            slots = list(range(first, first + 3))
            served, direct, branch = {}, {}, set()
            for s in slots:
                sleep_until(sim.truth(s)["attestation_due_ms"])
                served[s] = att_root(mux.port, s)
                direct[s] = att_root(node_port(sim.nodes[3]), s)
                branch.add(sim.node(3)["data"]["head"]["root"])
            heard = read_stream(mux.port, 2 * SLOT_MS / 1000.0)
            branch.add(sim.node(3)["data"]["head"]["root"])
            truth = {s: sim.truth(s)["block_root_at_slot"] for s in slots}
            wait_for(lambda: shadow_of(mux, "n3")["compared"] >= len(slots), 5,
                     what="every mirrored read scored")
            sh = shadow_of(mux, "n3")
            head = mux.status()["cluster_head"]
            print("\nforked shadow: served %d/%d on the slot's block; the shadow on its own "
                  "branch %d/%d; scored %s; the cluster stream carried %d roots, none of its "
                  "branch" % (sum(served[s] == truth[s] for s in slots), len(slots),
                              sum(direct[s] in branch for s in slots), len(slots),
                              {k: sh[k] for k in ("compared", "agreed", "behind", "other",
                                                  "state", "forked")}, len(heard)),
                  file=sys.stderr)
            for s in slots:
                self.assertEqual(served[s], truth[s], "served at slot %d" % s)
                self.assertNotEqual(direct[s], truth[s], "the shadow at slot %d" % s)
                self.assertIn(direct[s], branch)
            self.assertGreaterEqual(sh["other"], len(slots))
            self.assertEqual(sh["agreed"], 0)
            self.assertEqual(sh["state"], "forked")
            self.assertTrue(sh["forked"])
            self.assertEqual(head["root"], sim.truth(int(head["slot"]))["block_root_at_slot"])
            self.assertTrue(heard, "the cluster stream carried heads")
            self.assertFalse(heard & branch, heard & branch)
            self.assertGreater(mux.status()["events"]["shadow_events"], 0)
        finally:
            rc = mux.stop()
            sim.stop()
        self.assertEqual(rc, 0)


class CountsForNothing(unittest.TestCase):
    def test_shadow_is_no_quorum_no_health_no_candidate(self):
        sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8)
        mux = Beaconmux(config_text=config(sim.nodes, 2))
        try:
            mux.wait_cluster_ready(15, what="three ready nodes")
            self.assertEqual(mux.status()["tracker"]["quorum"], 1)  # two serving nodes
            code, _, _ = http_request(mux.port, "GET", "/eth/v1/node/health")
            self.assertEqual(code, 200)
            for i in (0, 1):
                sim.put_node(i, {"down": True})
            wait_for(lambda: all(mux.upstreams()["n%d" % i]["state"] == "unreachable" for i in (0, 1)),
                     4 * SLOT_MS / 1000.0, what="both serving nodes unreachable")
            sim.clear_requests(2)
            self.assertEqual(mux.upstreams()["n2"]["state"], "ready")
            self.assertEqual(http_request(mux.port, "GET", "/eth/v1/node/health")[0], 503)
            self.assertEqual(http_request(mux.port, "GET", "/healthz")[0], 503)
            code, _, body = http_request(mux.port, "GET",
                                         "/eth/v1/beacon/states/head/finality_checkpoints")
            self.assertNotEqual(code, 200, body)
            before = shadow_of(mux, "n2")
            s = sim.truth()["current_slot"]
            code, _, body = http_request(mux.port, "GET",
                                         "/eth/v1/validator/attestation_data?slot=%d" % s)
            self.assertEqual(code, 503, body)
            wait_for(lambda: shadow_of(mux, "n2")["answered"] > before["answered"], 5,
                     what="the mirrored read answered by the shadow")
            counts = sim.requests(2)["data"]
            print("\nserving nodes down, the shadow ready: node/health 503, healthz 503, a read "
                  "%d, attestation data 503; the shadow answered the mirror (%s) and was asked "
                  "%s" % (code, shadow_of(mux, "n2")["answered"], counts), file=sys.stderr)
            self.assertEqual(counts.get("getStateFinalityCheckpoints", 0), 0, counts)
            self.assertEqual(counts.get("produceAttestationData", 0), 1, counts)
        finally:
            rc = mux.stop()
            sim.stop()
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    main()
