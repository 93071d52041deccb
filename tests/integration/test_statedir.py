# SPDX-License-Identifier: MIT
"""stateDir: what beaconmux remembers for the nodes survives its own restart.

beaconmux in front of two beaconsim nodes (n1 refuses SSZ bodies). A first beaconmux is
given preparations, registrations and subscriptions and learns that n1 refuses SSZ; it
stops (SIGTERM saves the state). A second beaconmux, a new process that never saw those
writes, starts on the same stateDir: the nodes' submission logs (the ground truth) must
show the replay of the first one's validator state, and an SSZ write must be answered 415
at once without reaching any node (unless that node was upgraded meanwhile: another
version takes SSZ again). The duty journal's judged slots and counts come back as they were. A corrupt file, a file of another network and a
missing directory are each reported; the first two leave a serving beaconmux.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN_DIR, Beaconmux, Beaconsim, Proc, main, wait_for  # noqa: E402

# Timeouts generous enough that a loaded machine never makes a node look unreachable: a
# node that comes back from unreachable rightly forgets its SSZ refusal, which would look
# like a restore that failed.
CONFIG = """
timeouts:
  connect: 1s
  read: 3s
  write: 3s
discovery:
  retryInterval: 200ms
duties:
  writeTimeout: 3s
stateDir: %s
"""
SIG = "0x" + "cc" * 96
FEE = lambda b: "0x" + ("%02x" % b) * 20  # noqa: E731
PUBKEY = lambda b: "0x" + ("%02x" % b) * 48  # noqa: E731


def reg_ssz(b):
    """One SignedValidatorRegistrationV1 in SSZ: fee, gas, timestamp, pubkey, signature."""
    return (bytes([b]) * 20 + (30000000).to_bytes(8, "little") +
            (1700000000).to_bytes(8, "little") + bytes([b]) * 48 + b"\xcc" * 96)


class StateDir(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=2, slot_ms=1000, slots_per_epoch=8, node_specs={1: "no-ssz"})
        cls.ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                           for i, u in enumerate(cls.sim.nodes))

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bm-state-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, state_dir=None):
        mux = Beaconmux(config_text=CONFIG % (state_dir or self.dir) + self.ups)
        for i in range(2):
            mux.wait_state("n%d" % i, "ready", timeout=10)
        return mux

    def post(self, mux, path, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return mux.request("POST", path, data, {"Content-Type": ctype})

    def subs_since(self, i, mark, route):
        return [s for s in self.sim.submissions(i, since=mark)["data"] if s["route"] == route]

    def test_restart_restores_and_replays(self):
        mux = self.start()
        t = self.sim.truth()
        preps = [{"validator_index": str(v), "fee_recipient": FEE(0x40 + v % 8)}
                 for v in range(500, 520)]
        regs = [{"message": {"fee_recipient": FEE(v), "gas_limit": "30000000",
                             "timestamp": "1700000000", "pubkey": PUBKEY(v)}, "signature": SIG}
                for v in (5, 6)]
        csubs = [{"validator_index": "500", "committee_index": "0", "committees_at_slot": "1",
                  "slot": str(t["current_slot"] + 60), "is_aggregator": True}]
        self.assertEqual(self.post(mux, "/eth/v1/validator/prepare_beacon_proposer", preps)[0], 200)
        self.assertEqual(self.post(mux, "/eth/v1/validator/register_validator", regs)[0], 200)
        self.assertEqual(
            self.post(mux, "/eth/v1/validator/beacon_committee_subscriptions", csubs)[0], 200)
        # n1 refuses SSZ: the client is told 415 (it resends JSON), and beaconmux remembers
        st, _, _ = self.post(mux, "/eth/v1/validator/register_validator", reg_ssz(7),
                             "application/octet-stream")
        self.assertEqual(st, 415)
        self.assertEqual(mux.stop(), 0)
        self.assertTrue(any("saved at shutdown" in line for line in mux.stderr()), mux.stderr())
        with open(os.path.join(self.dir, "state.json")) as f:
            saved = json.load(f)
        self.assertEqual(saved["format"], "beaconmux-state")
        self.assertEqual(saved["network"], "default")
        self.assertEqual(len(saved["sections"]["sszRefusals"]), 1)
        self.assertEqual(saved["sections"]["sszRefusals"][0]["node"], "n1")

        # a new beaconmux cannot know which node restarted while none ran: each node's first
        # discovery gets the restored state
        marks = [self.sim.submissions(i)["last_seq"] for i in range(2)]
        mux = self.start()
        try:
            self.assertTrue(any("replay restored (2" in line for line in mux.stderr()),
                            [line for line in mux.stderr() if "state" in line])

            def replayed(i):
                got = self.subs_since(i, marks[i], "prepareBeaconProposer")
                items = {p["validator_index"]: p["fee_recipient"] for s in got for p in s["body"]}
                return items if all(str(v) in items for v in range(500, 520)) else None
            for i in range(2):
                items = wait_for(lambda: replayed(i), 10, what="the restored replay to n%d" % i)
                self.assertEqual({k: v for k, v in items.items() if 500 <= int(k) < 520},
                                 {str(v): FEE(0x40 + v % 8) for v in range(500, 520)})
                # the registrations are a request of their own, which may come later

                def regs_replayed(i):
                    got = {r["message"]["pubkey"] for s in
                           self.subs_since(i, marks[i], "registerValidator") for r in s["body"]}
                    return got if {PUBKEY(5), PUBKEY(6)} <= got else None
                wait_for(lambda: regs_replayed(i), 10, what="the restored registrations to n%d" % i)
            # the refusal came back: an SSZ registration is answered 415 before sending
            mark0 = self.sim.submissions(0)["last_seq"]
            st, _, _ = self.post(mux, "/eth/v1/validator/register_validator", reg_ssz(8),
                                 "application/octet-stream")
            self.assertEqual(st, 415)
            self.assertEqual(mux.status()["broadcast"]["ssz_refused_at_once"], 1)
            self.assertEqual([s for s in self.subs_since(0, mark0, "registerValidator")
                              if s["headers"].get("Content-Type") ==
                              "application/octet-stream"], [])
        finally:
            self.assertEqual(mux.stop(), 0)

    def test_node_upgraded_while_down_gets_ssz_again(self):
        mux = self.start()
        st, _, _ = self.post(mux, "/eth/v1/validator/register_validator", reg_ssz(9),
                             "application/octet-stream")
        self.assertEqual(st, 415)  # n1 refuses SSZ, remembered with its version
        self.assertEqual(mux.stop(), 0)
        with open(os.path.join(self.dir, "state.json")) as f:
            refusals = json.load(f)["sections"]["sszRefusals"]
        self.assertEqual([(r["node"], r["version"].split("/")[0]) for r in refusals],
                         [("n1", "Lighthouse")])
        # n1 is upgraded (another client version, now taking SSZ) while beaconmux is down
        self.sim.put_node(1, {"no_ssz": False, "client": "teku"})
        self.addCleanup(self.sim.put_node, 1, {"no_ssz": True, "client": "lighthouse"})
        mark = self.sim.submissions(1)["last_seq"]
        mux = self.start()
        try:
            st, _, body = self.post(mux, "/eth/v1/validator/register_validator", reg_ssz(10),
                                    "application/octet-stream")
            self.assertEqual(st, 200, body)
            self.assertEqual(mux.status()["broadcast"]["ssz_refused_at_once"], 0)
            self.assertTrue([s for s in self.subs_since(1, mark, "registerValidator")
                             if s["headers"].get("Content-Type") == "application/octet-stream"],
                            self.sim.submissions(1, since=mark))  # n1 took the SSZ body
        finally:
            self.assertEqual(mux.stop(), 0)

    def journal(self, mux, slot):
        st, _, body = mux.request("GET", "/beaconmux/v1/journal?from_slot=%d&to_slot=%d"
                                  % (slot, slot))
        self.assertEqual(st, 200, body)
        return json.loads(body)

    def test_duty_journal_survives_a_restart(self):
        mux = self.start()
        slot = self.sim.truth()["current_slot"]
        for path in ("/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot,
                     "/eth/v1/beacon/blocks/head/root"):
            self.assertEqual(mux.request("GET", path)[0], 200)
        # judged two slots later; one more so that the restarted process starts settling
        # past it (it judges from its own start on)
        wait_for(lambda: self.journal(mux, slot)["journal"]["slots"][0]["stage"] != "open" and
                 self.sim.truth()["current_slot"] >= slot + 3, 10, what="slot %d judged" % slot)
        before = self.journal(mux, slot)
        self.assertEqual(sorted(e["duty"] for e in before["journal"]["slots"][0]["entries"]),
                         ["attestation_data", "head_root"])
        self.assertEqual(mux.stop(), 0)
        with open(os.path.join(self.dir, "state.json")) as f:
            self.assertIn("journal", json.load(f)["sections"])
        mux = self.start()
        try:
            after = self.journal(mux, slot)
            self.assertEqual(after["journal"], before["journal"])  # entries, verdicts, roots
            for k in ("provisional", "final", "records"):
                self.assertEqual(after["summary"][k], before["summary"][k], k)
        finally:
            self.assertEqual(mux.stop(), 0)

    def test_corrupt_and_foreign_files_are_ignored(self):
        path = os.path.join(self.dir, "state.json")
        for text, why in (('{"format":"beaconmux-state","vers', "corrupt at byte"),
                          (json.dumps({"format": "beaconmux-state", "version": 1,
                                       "network": "mainnet", "sections": {}}),
                           'written for network "mainnet"')):
            with open(path, "w") as f:
                f.write(text)
            mux = self.start()
            try:
                self.assertTrue(any(why in line and "ignored" in line for line in mux.stderr()),
                                mux.stderr())
                self.assertEqual(mux.request("GET", "/eth/v1/node/version")[0], 200)
                with open(path + ".bad") as f:
                    self.assertEqual(f.read(), text)  # kept for the operator
            finally:
                self.assertEqual(mux.stop(), 0)
            with open(path) as f:  # replaced by the shutdown save
                self.assertEqual(json.load(f)["network"], "default")
            os.unlink(path + ".bad")

    def test_missing_directory_is_a_clear_error(self):
        missing = os.path.join(self.dir, "nope")
        fd, cfg = tempfile.mkstemp(suffix=".yaml", dir=self.dir)
        with os.fdopen(fd, "w") as f:
            f.write(CONFIG % missing + self.ups)
        p = Proc([os.path.join(BIN_DIR, "beaconmux"), "--listen", "127.0.0.1:0",
                  "--config", cfg])
        try:
            rc = p.p.wait(10)
        finally:
            p.stop()
        self.assertEqual(rc, 1)
        self.assertTrue(any("stateDir %s: not a writable directory" % missing in line
                            for line in p.stderr()), p.stderr())


if __name__ == "__main__":
    main()
