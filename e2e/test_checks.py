#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests of the e2e checks and log parsers on made-up runs: a clean run passes every check,
and each defect the checks exist for makes its check fail. No devnet, no Lodestar: runs in
a second (ctest: unit.e2e_checks; `make e2e` runs it first).

    python3 e2e/test_checks.py
"""

import datetime
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checks  # noqa: E402
import evidence  # noqa: E402
import schedule  # noqa: E402

G = 1_800_000_000.0  # genesis
SPS = 4
URLS = ["http://127.0.0.1:1000", "http://127.0.0.1:1001", "http://127.0.0.1:1002"]
SLOTS = 12
STOP = schedule.Schedule("test", SLOTS, (schedule.Fault("stop", 0, 4, 7),), offset=0.5,
                         recover_slots=2)


def root(slot, fork=""):
    return "0x" + f"{fork}{slot:08x}".rjust(8, "a") + "cd" * 28


def at(slot, frac):
    return G + (slot + frac) * SPS


class Made:
    """A clean run of STOP: node0 stopped from slot 4.5 to 7.5, everything else right."""

    def __init__(self):
        self.actions = [schedule.Action(4, 0, "stop", at(4, .5), at(4, .5)),
                        schedule.Action(7, 0, "resume", at(7, .5), at(7, .5))]
        self.samples = []
        for s in range(0, SLOTS + 1):
            down = at(4, .5) <= at(s, 2 / 3) < at(7, .5)
            ups = []
            for i in range(3):
                h = 3 if (i == 0 and down) else s
                lag = s - h
                state = "ready" if lag <= 1 else ("lagging" if lag < 3 else "unreachable")
                ups.append({"id": f"node{i}", "state": state, "reason": "made up",
                            "head": {"slot": str(h), "root": root(h), "polled": False},
                            "lag": lag, "stream": {"failures": 2}})
            self.samples.append({
                "slot": s, "t": at(s, 2 / 3), "t_direct": at(s, 2 / 3) + 0.01,
                "status": {"head_guarantee": {"ok": True, "reason": "made up"},
                           "cluster_head": {"slot": str(s), "root": root(s)},
                           "upstreams": ups, "attestation_data": {"fallback": 0}},
                "direct": [{"error": "timeout"} if (i == 0 and down) else
                           {"slot": s, "root": root(s)} for i in range(3)]})
        bm = evidence.BeaconmuxLog()
        vc = evidence.VcLog()
        for s in range(0, SLOTS + 1):
            bm.moves.append(evidence.HeadMove(at(s, 0.05), "extend", root(s)[:10], s, 1))
            vc.head_events.append((at(s, 0.06), s, root(s)))
            if s >= 1:
                vc.attestations[s] = evidence.Attestation(s, root(s), at(s, 0.08),
                                                          at(s, 0.065), at(s, 0.07), 2)
        self.bm, self.vc = bm, vc
        self.canonical = {s: root(s) for s in range(0, SLOTS + 1)}
        self.score = made_score(SLOTS - 1)

    def run(self):
        return checks.Run(schedule=STOP, actions=self.actions, genesis_time=G,
                          seconds_per_slot=SPS, node_urls=URLS, samples=self.samples,
                          score=self.score, canonical=self.canonical, bm_log=self.bm,
                          vc_log=self.vc, end_time=at(SLOTS, 0.9))


def made_score(last, missed=(), wrong_head=()):
    per = {}
    for s in range(1, last + 1):
        per[str(s)] = {"block": s not in missed, "expected_votes": 2, "included_votes": 2,
                       "head_correct": 0 if s in wrong_head else 2, "target_correct": 2}
    return {"per_slot": per}


def upstream(m, slot, i):
    return m.samples[slot]["status"]["upstreams"][i]


class CleanRun(unittest.TestCase):
    def test_every_check_passes(self):
        m = Made()
        for c in checks.beaconmux_checks(m.run(), made_score(SLOTS - 1)):
            self.assertTrue(c.ok, f"{c.name}: {c.failures}")


class ClusterHead(unittest.TestCase):
    def test_null_cluster_head_fails(self):
        m = Made()
        m.samples[2]["status"]["cluster_head"] = None
        c = checks.check_cluster_head(m.run())
        self.assertFalse(c.ok)
        self.assertIn("slot 2: cluster_head null", c.failures)

    def test_guarantee_off_fails(self):
        m = Made()
        m.samples[3]["status"]["head_guarantee"] = {"ok": False, "reason": "no head"}
        self.assertFalse(checks.check_cluster_head(m.run()).ok)

    def test_two_slots_behind_fails(self):
        m = Made()
        m.samples[9]["status"]["cluster_head"] = {"slot": "7", "root": root(7)}
        c = checks.check_cluster_head(m.run())
        self.assertFalse(c.ok)
        self.assertIn("slot 9: cluster head at slot 7, the chain's at 9", c.failures)

    def test_off_the_canonical_chain_fails(self):
        m = Made()
        m.samples[5]["status"]["cluster_head"] = {"slot": "5", "root": root(5, "f")}
        self.assertFalse(checks.check_cluster_head(m.run()).ok)


class NodesFollowed(unittest.TestCase):
    def test_a_running_node_two_slots_behind_fails(self):
        m = Made()
        u = upstream(m, 9, 2)
        u["head"]["slot"], u["lag"] = "7", 2
        c = checks.check_nodes_followed(m.run())
        self.assertFalse(c.ok)
        self.assertTrue(any("slot 9 node2" in f for f in c.failures))

    def test_a_running_node_without_head_fails(self):
        m = Made()
        u = upstream(m, 2, 1)
        u["head"], u["lag"], u["state"] = None, None, "no-head"
        self.assertFalse(checks.check_nodes_followed(m.run()).ok)

    def test_the_stopped_node_is_excused(self):
        m = Made()
        self.assertEqual(upstream(m, 6, 0)["state"], "unreachable")
        self.assertTrue(checks.check_nodes_followed(m.run()).ok)


class DownNodes(unittest.TestCase):
    def test_stopped_node_shown_ready_fails(self):
        m = Made()
        upstream(m, 6, 0)["state"] = "ready"  # head 3, the chain at 6
        c = checks.check_down_nodes_say_so(m.run())
        self.assertFalse(c.ok)
        self.assertTrue(any("slot 6 node0: ready" in f for f in c.failures))

    def test_ready_with_an_old_head_fails_for_any_node(self):
        m = Made()
        u = upstream(m, 10, 1)
        u["head"]["slot"] = "8"
        self.assertFalse(checks.check_down_nodes_say_so(m.run()).ok)


class Recovery(unittest.TestCase):
    def test_never_ready_again_fails(self):
        m = Made()
        for s in range(7, SLOTS + 1):
            upstream(m, s, 0)["state"] = "lagging"
        c = checks.check_recovery(m.run())
        self.assertFalse(c.ok)
        self.assertIn("node0 back at slot 7", c.failures[0])


class StreamFailures(unittest.TestCase):
    def bump(self, m, node, from_slot):
        for s in range(from_slot, SLOTS + 1):
            upstream(m, s, node)["stream"]["failures"] += 1

    def test_one_failure_while_up_passes(self):
        m = Made()
        self.bump(m, 1, 3)
        self.assertTrue(checks.check_stream_failures(m.run()).ok)

    def test_repeated_failures_while_up_fail(self):
        m = Made()
        self.bump(m, 1, 3)
        self.bump(m, 1, 9)
        c = checks.check_stream_failures(m.run())
        self.assertFalse(c.ok)
        self.assertIn("node1: 2 stream failures while up", c.failures)

    def test_failures_of_the_stopped_node_do_not_count(self):
        m = Made()
        self.bump(m, 0, 5)
        self.bump(m, 0, 6)
        self.assertTrue(checks.check_stream_failures(m.run()).ok)


class ServedHeads(unittest.TestCase):
    def test_a_stale_head_while_the_tracker_had_the_new_one_fails(self):
        m = Made()
        m.vc.attestations[6].head = root(5)  # served the head of slot 5 at slot 6
        c = checks.check_served_heads(m.run())
        self.assertFalse(c.ok)
        self.assertTrue(c.failures[0].startswith("slot 6: signed head"), c.failures)

    def test_a_head_the_tracker_moved_to_during_the_request_passes(self):
        m = Made()
        a = m.vc.attestations[6]
        a.t_request = at(6, 0.04)  # the tracker moved at 0.05, inside the request
        a.head = root(6)
        self.assertTrue(checks.check_served_heads(m.run()).ok)
        a.head = root(5)  # the head before the move, also held during the request
        self.assertTrue(checks.check_served_heads(m.run()).ok)

    def test_no_tracker_at_all_fails(self):
        m = Made()
        m.bm.moves = []
        self.assertFalse(checks.check_served_heads(m.run()).ok)

    def test_a_head_event_not_from_the_tracker_fails(self):
        m = Made()
        m.vc.head_events.append((at(8, 0.5), 8, root(8, "e")))
        c = checks.check_served_heads(m.run())
        self.assertFalse(c.ok)
        self.assertIn("not a cluster head move", c.failures[0])

    def test_served_without_the_expected_head_fails(self):
        m = Made()
        m.samples[-1]["status"]["attestation_data"]["fallback"] = 1
        self.assertFalse(checks.check_served_heads(m.run()).ok)


class ClientErrors(unittest.TestCase):
    def test_an_error_line_fails(self):
        m = Made()
        m.vc.errors.append((at(3, 0.7), "Error publishing SyncCommitteeContribution slot=3"))
        c = checks.check_client_errors(m.run())
        self.assertFalse(c.ok)
        self.assertEqual(c.failures,
                         ["slot 3 +2.800 s: Error publishing SyncCommitteeContribution slot=3"])

    def test_errors_after_the_end_do_not_count(self):
        m = Made()
        m.vc.errors.append((at(SLOTS + 1, 0.1), "Error on runEvery fn (the devnet stopping)"))
        self.assertTrue(checks.check_client_errors(m.run()).ok)


class Chain(unittest.TestCase):
    def test_a_missed_slot_fails(self):
        m = Made()
        m.score = made_score(SLOTS - 1, missed=(5,))
        c = checks.check_chain(m.run())
        self.assertFalse(c.ok)
        self.assertIn("missed slots [5]", c.failures)

    def test_a_wrong_head_vote_fails_and_is_explained(self):
        m = Made()
        m.score = made_score(SLOTS - 1, wrong_head=(6,))
        m.vc.errors.append((at(5, 0.9), "Error publishing aggregateAndProofs slot=5"))
        del m.vc.attestations[6]
        m.vc.attest_task_end[5] = at(6, 0.01)
        c = checks.check_chain(m.run())
        self.assertFalse(c.ok)
        self.assertTrue(any("Error publishing aggregateAndProofs" in f for f in c.failures))
        self.assertTrue(any("task of slot 5 ended at slot 6 +0.040 s" in f
                            for f in c.failures), c.failures)

    def test_less_than_the_fallback_list_fails(self):
        m = Made()
        m.score = made_score(SLOTS - 1, missed=(5,))
        c = checks.check_at_least_fallback(m.run(), made_score(SLOTS - 1))
        self.assertFalse(c.ok)
        self.assertIn("proposals: beaconmux 10, fallback list 11", c.failures)


class Parsers(unittest.TestCase):
    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", delete=False, suffix=".log")
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_beaconmux_log(self):
        p = self.write(
            "2027-01-15T10:00:01.250Z debug head: cluster head extend 0xa37f19f0@1 (node 0)\n"
            "2027-01-15T10:00:03.100Z info  head: cluster head reorg 0x0a0a0a0a@2 -> "
            "0x0b0b0b0b@2 (depth 1, announced by node 2)\n"
            "2027-01-15T10:00:04.000Z info  nodestream http://127.0.0.1:1001: stream dropped "
            "(no byte for 8000 ms); reconnecting in 900 ms\n"
            "2027-01-15T10:00:05.000Z warn  monitor: NO CLUSTER HEAD while the chain runs\n")
        log = evidence.read_beaconmux_log(p)
        self.assertEqual([(m.move, m.root, m.slot, m.node) for m in log.moves],
                         [("extend", "0xa37f19f0", 1, 0), ("reorg", "0x0b0b0b0b", 2, 2)])
        self.assertEqual(log.stream_failures[0].url, "http://127.0.0.1:1001")
        self.assertEqual(len(log.no_head_warnings), 1)
        self.assertAlmostEqual(log.moves[1].t - log.moves[0].t, 1.85, places=3)
        self.assertIsNone(evidence.head_at(log.moves, log.moves[0].t - 0.001))
        self.assertEqual(evidence.head_at(log.moves, log.moves[1].t).root, "0x0b0b0b0b")

    def test_vc_log(self):
        esc = "\x1b[36m"
        p = self.write(
            f"Jan-15 10:00:01.260[]              {esc}verbose\x1b[39m: Found new chain head "
            "slot=1, head=0xa37f19f0aa, previousDuty=0x01, currentDuty=0x01\n"
            "Jan-15 10:00:01.270[]                debug: HttpClient request "
            "routeId=produceAttestationData\n"
            "Jan-15 10:00:01.280[]                debug: HttpClient response "
            "routeId=produceAttestationData\n"
            "Jan-15 10:00:01.290[]                debug: Signed attestation slot=1, index=0, "
            "head=0xa37f19f0aa, validatorIndex=5\n"
            "Jan-15 10:00:01.291[]                debug: Signed attestation slot=1, index=0, "
            "head=0xa37f19f0aa, validatorIndex=7\n"
            "Jan-15 10:00:01.400[]                 info: Published attestations slot=1, "
            "count=2\n"
            "Jan-15 10:00:02.700[]                error: Error publishing aggregateAndProofs "
            "slot=1, index=0  - Internal Server Error: PublishError.Duplicate\n"
            "Error: stack line\n")
        near = datetime.datetime(2027, 1, 20, tzinfo=datetime.timezone.utc).timestamp()
        log = evidence.read_vc_log(p, near)
        a = log.attestations[1]
        self.assertEqual((a.head, a.validators), ("0xa37f19f0aa", 2))
        self.assertAlmostEqual(a.t_response - a.t_request, 0.010, places=3)
        self.assertEqual(log.head_events[0][1:], (1, "0xa37f19f0aa"))
        self.assertEqual(log.attestations_published, {1: 2})
        self.assertEqual(a.t_signed, datetime.datetime(
            2027, 1, 15, 10, 0, 1, 290000, tzinfo=datetime.timezone.utc).timestamp())
        self.assertEqual(evidence.error_kinds(log.errors),
                         {"Error publishing aggregateAndProofs": 1})
        self.assertAlmostEqual(log.attest_task_end[1] - a.t_signed, 1.41, places=3)


if __name__ == "__main__":
    unittest.main(verbosity=1)
