# SPDX-License-Identifier: MIT
"""A stopped node leaves `ready` within the slot (issue 14, item 4).

A real Lodestar validator client behind beaconmux, in front of three Lodestar nodes with 2 s
slots, saw a stopped (SIGSTOP) node stay `ready` for 5 s while requests queued on it: its
event stream was up and silent, and it only became `lagging` once its lag passed
`maxHeadLag`. Now a node that has not followed the cluster head a quarter slot after the
head moved is asked for its head, and a node that does not answer within a quarter slot (at
most 1 s) is unreachable until it answers again.

beaconsim's `hang` is the stopped process: every request (event streams too) is read and
never answered, an open stream goes silent, and clearing it answers what was held (as
SIGCONT does). With default timeouts (a 2 s read timeout, which alone took 2.5 slots):

- the hung node leaves `ready` within the slot whose cluster head move it missed, at about
  half a slot after that move;
- while it is out, duty reads (attestation data, head root) and ordinary reads reach the
  other nodes only, and are answered on the slot's block;
- cleared, it is `ready` again within about a slot.

Waits are bounded polls or waits for a point of a slot taken from the truth.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Beaconmux, Beaconsim, http_request, main, now_ms, sleep_until,  # noqa: E402
                     upstreams_yaml, wait_for)

SLOT_MS = 2000

CONFIG = """
discovery:
  retryInterval: 200ms
"""

class StoppedNode(unittest.TestCase):
    def test_stopped_node_leaves_ready_within_the_slot(self):
        sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8)
        mux = Beaconmux(config_text=CONFIG + upstreams_yaml(sim.nodes))
        try:
            mux.wait_cluster_ready(15, what="three ready nodes and a cluster head")
            s = sim.truth()["current_slot"] + 1
            # stopped in the middle of slot s: the first move it misses is slot s + 1's
            sleep_until(sim.truth(s)["start_ms"] + SLOT_MS // 2)
            sim.put_node(0, {"hang": True})
            stopped_ms = now_ms()
            next_start = sim.truth(s + 1)["start_ms"]
            wait_for(lambda: mux.upstreams()["n0"]["state"] != "ready",
                     (next_start + 2 * SLOT_MS - now_ms()) / 1000.0,
                     what="n0 out of ready")
            u = mux.upstreams()["n0"]
            left_ms = u["state_since_ms"]
            head = mux.status()["cluster_head"]
            moved_ms = head["since_ms"]
            print("\nstopped at +%d ms in slot %d; cluster head of slot %s moved at +%d ms in "
                  "slot %d; n0 %s at +%d ms after that move (%d ms after the stop): %s"
                  % (stopped_ms - sim.truth(s)["start_ms"], s, head["slot"],
                     moved_ms - next_start, s + 1, u["state"], left_ms - moved_ms,
                     left_ms - stopped_ms, u["reason"]), file=sys.stderr)
            self.assertEqual(u["state"], "unreachable", u)
            self.assertIn("no answer within 500 ms", u["reason"])
            self.assertEqual(int(head["slot"]), s + 1, head)
            # within the slot it missed: a quarter slot to follow, a quarter slot to answer
            self.assertLess(left_ms, sim.truth(s + 2)["start_ms"])
            self.assertLessEqual(left_ms - moved_ms, SLOT_MS // 2 + 400)
            self.assertGreaterEqual(left_ms - moved_ms, SLOT_MS // 2 - 50)
            self.assertGreaterEqual(u["head_polls"]["unanswered"], 1, u)

            # nothing new is queued on it: duty reads and reads go to the others
            for i in range(3):
                sim.clear_requests(i)
            first = sim.truth()["current_slot"] + 1
            votes = {}
            for slot in (first, first + 1):
                t = sim.truth(slot)
                sleep_until(t["attestation_due_ms"])
                t0 = time.monotonic()
                code, _, body = http_request(
                    mux.port, "GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)
                took = time.monotonic() - t0
                self.assertEqual(code, 200, body)
                votes[slot] = (json.loads(body)["data"]["beacon_block_root"], took)
                code, _, body = http_request(mux.port, "GET", "/eth/v1/beacon/blocks/head/root")
                self.assertEqual(code, 200, body)
                for _ in range(5):
                    code, _, body = http_request(
                        mux.port, "GET", "/eth/v1/beacon/states/head/finality_checkpoints")
                    self.assertEqual(code, 200, body)
            for slot, (root, took) in votes.items():
                self.assertEqual(root, sim.truth(slot)["block_root_at_slot"], slot)
                self.assertLess(took, 0.5, "attestation data of slot %d took %.3f s" % (slot, took))
            counts = [sim.requests(i)["data"] for i in range(3)]
            ops = ("produceAttestationData", "getBlockRoot", "getStateFinalityCheckpoints")
            for op in ops:
                self.assertEqual(counts[0].get(op, 0), 0, (op, counts[0]))
                self.assertGreater(counts[1].get(op, 0) + counts[2].get(op, 0), 0, (op, counts))
            self.assertEqual(mux.upstreams()["n0"]["state"], "unreachable")

            # it answers again: back to ready
            resumed_ms = now_ms()
            sim.put_node(0, {"hang": False})
            wait_for(lambda: mux.upstreams()["n0"]["state"] == "ready", 2 * SLOT_MS / 1000.0 + 1,
                     what="n0 ready again")
            back_ms = mux.upstreams()["n0"]["state_since_ms"]
            print("resumed: n0 ready %d ms later" % (back_ms - resumed_ms), file=sys.stderr)
        finally:
            rc = mux.stop()
            sim.stop()
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    main()
