#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of beaconsim: the real binary on ephemeral loopback ports.

Checks that the behaviours do what their names say (down, hang, error-rate, fork, stale,
lag), that event streams carry head events in the standard and Lighthouse styles and in
fragments, that gzip and no-ssz behave, that submissions are recorded, that scenarios
re-org as documented, and that --help documents every flag and SPEC word. Every wait is
bounded and keyed to the slot timing that /sim/v1/truth reports.
"""
import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

BIN_DIR = os.environ.get("BM_BIN_DIR", "build/debug")
SIM = os.path.join(BIN_DIR, "beaconsim")
SLOT_MS = 1000


def now_ms():
    return int(time.time() * 1000)


def request(url, method="GET", body=None, headers=None, timeout=5.0):
    """One HTTP request; returns (status, headers dict (lower-case), body bytes)."""
    assert url.startswith("http://")
    hostport, _, path = url[7:].partition("/")
    host, _, port = hostport.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, "/" + path, body=data, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_json(url, **kw):
    st, hd, body = request(url, **kw)
    return st, (json.loads(body) if body else None)


def wait_for(cond, timeout, what, step=0.02):
    """Polls cond() until it returns a true value or the bound passes."""
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(step)


def sleep_until(t_ms):
    """Waits for a wall-clock point (a slot boundary reported by /sim/v1/truth)."""
    d = (t_ms - now_ms()) / 1000.0
    if d > 0:
        time.sleep(d)


class SseReader:
    """A raw event-stream client: keeps the decoded (de-chunked) bytes and the chunks."""

    def __init__(self, url, topics, timeout=5.0):
        hostport, _, path = url[7:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        q = "&".join("topics=" + t for t in topics)
        self.sock.sendall(("GET /eth/v1/events?%s HTTP/1.1\r\nHost: x\r\n\r\n" % q).encode())
        self.raw = b""
        self.head = None
        self.body = b""
        self.chunks = []
        self.closed = False

    def _pump(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.time()))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        if not data:
            self.closed = True
            return
        self.raw += data
        if self.head is None and b"\r\n\r\n" in self.raw:
            self.head, self.raw = self.raw.split(b"\r\n\r\n", 1)
        while self.head is not None:
            if b"\r\n" not in self.raw:
                break
            size_line, rest = self.raw.split(b"\r\n", 1)
            n = int(size_line, 16)
            if len(rest) < n + 2:
                break
            self.chunks.append(rest[:n])
            self.body += rest[:n]
            self.raw = rest[n + 2:]
            if n == 0:
                self.closed = True
                break

    def wait(self, pred, timeout, what):
        deadline = time.time() + timeout
        while not pred(self):
            if self.closed or time.time() > deadline:
                raise AssertionError("stream: timed out or closed waiting for " + what)
            self._pump(deadline)
        return True

    def status(self):
        return int(self.head.split(b" ")[1]) if self.head else None

    def close(self):
        self.sock.close()


class BeaconsimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = [SIM, "--nodes", "6", "--base-port", "0", "--slot-ms", str(SLOT_MS),
                "--slots-per-epoch", "4", "--seed", "5", "--log-level", "warn",
                "--node", "1:lag=800",
                "--node", "4:sse-style=lighthouse,gzip",
                "--node", "5:sse-fragment,no-ssz,client=prysm"]
        # stderr to a file: a pipe nobody reads could fill up and stall the simulator
        cls.errfile = tempfile.TemporaryFile()
        cls.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=cls.errfile)
        cls.nodes = {}
        cls.control = None
        deadline = time.time() + 10
        while cls.control is None:
            line = cls.proc.stdout.readline().decode()
            if not line:
                cls.errfile.seek(0)
                raise AssertionError("beaconsim exited: " + cls.errfile.read().decode())
            parts = line.split()
            if parts[0] == "node":
                cls.nodes[int(parts[1])] = parts[2]
            elif parts[0] == "control":
                cls.control = parts[1]
            if time.time() > deadline:
                raise AssertionError("beaconsim did not print its ports")
        assert len(cls.nodes) == 6

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        try:
            rc = cls.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            raise
        cls.errfile.seek(0)
        err = cls.errfile.read().decode()
        cls.errfile.close()
        cls.proc.stdout.close()
        # ASan/UBSan reports would show up here
        assert "ERROR: AddressSanitizer" not in err and "runtime error" not in err, err
        assert rc == 0, "exit code %d: %s" % (rc, err)

    # helpers -----------------------------------------------------------------------------
    def truth(self, slot=None):
        st, t = get_json(self.control + "/sim/v1/truth" + ("" if slot is None else "?slot=%d" % slot))
        self.assertEqual(st, 200)
        return t

    def put_node(self, i, body):
        st, r = get_json(self.control + "/sim/v1/nodes/%d" % i, method="PUT", body=body)
        self.assertEqual(st, 200, r)
        return r["data"]

    def head_root(self, i):
        st, r = get_json(self.nodes[i] + "/eth/v1/beacon/blocks/head/root")
        self.assertEqual(st, 200)
        return r["data"]["root"]

    def head_slot(self, i):
        st, r = get_json(self.nodes[i] + "/eth/v1/node/syncing")
        return int(r["data"]["head_slot"])

    def wait_slot(self, s):
        """Waits until slot s has started."""
        t = self.truth(s)
        sleep_until(t["start_ms"])

    # tests -------------------------------------------------------------------------------
    def test_help_documents_everything(self):
        out = subprocess.run([SIM, "--help"], capture_output=True, timeout=10).stdout.decode()
        for flag in ["--nodes", "--base-port", "--host", "--control", "--slot-ms",
                     "--genesis-delay-ms", "--slots-per-epoch", "--fork", "--gloas-epoch",
                     "--skip-rate", "--seed", "--validators", "--node", "--log-level",
                     "--log-format", "--help", "--version"]:
            self.assertIn(flag, out)
        for word in ["lag=", "jitter=", "down", "hang", "error-rate=", "slow=", "stale", "fork",
                     "clock-skew=", "syncing", "optimistic", "sse-drop=", "client=",
                     "sse-style=", "sse-fragment", "gzip", "no-ssz", "payload-delay=",
                     "big-values", "sse-head-with-event", "sse-first-event-late="]:
            self.assertIn(word, out)
        for api in ["/sim/v1/truth", "/sim/v1/nodes/I/submissions", "/sim/v1/scenario"]:
            self.assertIn(api, out)
        bad = subprocess.run([SIM, "--node", "0:lagg=1"], capture_output=True, timeout=10)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("lagg", bad.stderr.decode())
        v = subprocess.run([SIM, "--version"], capture_output=True, timeout=10)
        self.assertTrue(v.stdout.decode().startswith("beaconsim "))

    def test_lag_flips_attestation_data_at_800ms(self):
        t = self.truth()
        s = t["current_slot"] + 1
        ts = self.truth(s)
        prev = self.truth(s - 1)["block_root_at_slot"]
        self.assertIsNotNone(ts["root"])
        url = self.nodes[1] + "/eth/v1/validator/attestation_data?slot=%d" % s
        sleep_until(ts["start_ms"] + 200)
        st, r = get_json(url)
        self.assertEqual(st, 200)
        self.assertEqual(r["data"]["beacon_block_root"], prev)
        # node 0 has no lag: it has the new head already
        st, r0 = get_json(self.nodes[0] + "/eth/v1/validator/attestation_data?slot=%d" % s)
        self.assertEqual(r0["data"]["beacon_block_root"], ts["root"])

        def flipped():
            st, r = get_json(url)
            return now_ms() if r["data"]["beacon_block_root"] == ts["root"] else None

        t_flip = wait_for(flipped, 1.5, "the lagging node's new head", step=0.01)
        self.assertGreaterEqual(t_flip, ts["start_ms"] + 800)
        self.assertLess(t_flip, ts["start_ms"] + 800 + 400)

    def test_down_hang_error_rate(self):
        port = int(self.nodes[2].rsplit(":", 1)[1])
        self.put_node(2, {"down": True})
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        self.put_node(2, {"down": False})
        st, _ = get_json(self.nodes[2] + "/eth/v1/node/version")
        self.assertEqual(st, 200)
        self.put_node(2, {"hang": True})
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /eth/v1/node/version HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(1.0)
        with self.assertRaises(socket.timeout):
            s.recv(100)
        # the event stream hangs too: no headers at all
        sse = SseReader(self.nodes[2], ["head"], timeout=1.0)
        sse._pump(time.time() + 0.8)
        self.assertIsNone(sse.head)
        sse.close()
        # clearing hang answers what was held
        self.put_node(2, {"hang": False})
        s.settimeout(2.0)
        self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200"))
        s.close()
        self.put_node(2, {"error_rate": 1})
        st, hd, body = request(self.nodes[2] + "/eth/v1/node/version")
        self.assertEqual(st, 500)
        self.assertEqual(json.loads(body)["code"], 500)
        self.put_node(2, {"reset": True})
        st, _ = get_json(self.nodes[2] + "/eth/v1/node/version")
        self.assertEqual(st, 200)
        # slow: every answer waits
        self.put_node(2, {"spec": "slow=300"})
        t0 = time.time()
        st, _ = get_json(self.nodes[2] + "/eth/v1/node/version")
        self.assertEqual(st, 200)
        self.assertGreaterEqual(time.time() - t0, 0.3)
        # clock-skew: a node whose clock runs 3 slots ahead announces future heads
        self.put_node(2, {"slow": 0, "clock_skew": 3 * SLOT_MS})
        st, r = get_json(self.nodes[2] + "/eth/v1/node/syncing")
        self.assertGreaterEqual(int(r["data"]["head_slot"]), self.truth()["current_slot"] + 2)
        self.put_node(2, {"reset": True})
        st, counts = get_json(self.control + "/sim/v1/nodes/2/requests")
        self.assertGreaterEqual(counts["data"]["getNodeVersion"], 3)

    def test_fork_and_stale(self):
        self.put_node(3, {"fork": True})
        t = self.truth()
        self.wait_slot(t["current_slot"] + 2)
        s = t["current_slot"] + 1
        st, r = get_json(self.nodes[3] + "/eth/v1/beacon/blocks/%d/root" % s)
        self.assertEqual(st, 200)
        self.assertNotEqual(r["data"]["root"], self.truth(s)["root"])
        st, r0 = get_json(self.nodes[0] + "/eth/v1/beacon/blocks/%d/root" % s)
        self.assertEqual(r0["data"]["root"], self.truth(s)["root"])
        # rejoining emits chain_reorg
        sse = SseReader(self.nodes[3], ["chain_reorg", "head"])
        sse.wait(lambda x: x.head is not None, 2, "stream headers")
        self.put_node(3, {"fork": False})
        sse.wait(lambda x: b"event: chain_reorg" in x.body, 2, "chain_reorg")
        sse.close()
        self.assertEqual(self.head_root(3), self.truth()["head"]["root"])
        # stale: the head stops
        self.put_node(3, {"stale": True})
        h = self.head_slot(3)
        self.wait_slot(self.truth()["current_slot"] + 2)
        self.assertEqual(self.head_slot(3), h)
        self.assertGreater(self.head_slot(0), h)
        self.put_node(3, {"stale": False})
        self.assertEqual(self.head_root(3), self.truth()["head"]["root"])

    def test_sse_styles(self):
        for node, needle in [(0, b"event: head\ndata: {"), (4, b"event:head\ndata:{")]:
            sse = SseReader(self.nodes[node], ["head", "block"])
            sse.wait(lambda x: needle in x.body, 2.5, "a head event from node %d" % node)
            self.assertEqual(sse.status(), 200)
            self.assertIn(b"content-type: text/event-stream", sse.head.lower())
            ev = sse.body.split(needle, 1)[1].split(b"\n", 1)[0]
            data = json.loads(b"{" + ev)
            self.assertIn("slot", data)
            sse.close()
        # fragments: CRLF line ends, events split across several chunks
        sse = SseReader(self.nodes[5], ["head", "block", "head_v2"])
        sse.wait(lambda x: x.body.count(b"\r\n\r\n") >= 4, 3.5, "fragmented events")
        self.assertIn(b"event: head\r\ndata: {", sse.body)
        events = sse.body.count(b"\r\n\r\n")
        self.assertGreater(len(sse.chunks), events)
        sse.close()
        # both topic forms, unknown topics refused
        st, hd, body = request(self.nodes[0] + "/eth/v1/events?topics=head,nonsense")
        self.assertEqual(st, 400)
        self.assertEqual(json.loads(body)["message"], "Invalid topic: nonsense")

    def test_gzip_and_no_ssz(self):
        st, hd, body = request(self.nodes[4] + "/eth/v1/node/syncing",
                               headers={"Accept-Encoding": "gzip"})
        self.assertEqual(st, 200)
        self.assertEqual(hd.get("content-encoding"), "gzip")
        self.assertIn("head_slot", json.loads(gzip.decompress(body))["data"])
        st, hd, body = request(self.nodes[4] + "/eth/v1/node/syncing")
        self.assertNotIn("content-encoding", hd)
        json.loads(body)
        slot = self.truth()["current_slot"]
        url = "/eth/v1/validator/attestation_data?slot=%d" % slot
        st, hd, body = request(self.nodes[5] + url, headers={"Accept": "application/octet-stream"})
        self.assertEqual(st, 415)
        st, hd, body = request(self.nodes[0] + url, headers={"Accept": "application/octet-stream"})
        self.assertEqual(st, 200)
        self.assertEqual(hd["content-type"], "application/octet-stream")
        self.assertEqual(len(body), 128)
        st, hd, body = request(self.nodes[5] + "/eth/v1/node/version")
        self.assertIn("Prysm/", json.loads(body)["data"]["version"])

    def test_submissions_recorded(self):
        get_json(self.control + "/sim/v1/nodes/0/submissions", method="DELETE")
        body = [{"validator_index": "1", "fee_recipient": "0x" + "ab" * 20}]
        st, hd, _ = request(self.nodes[0] + "/eth/v1/validator/prepare_beacon_proposer",
                            method="POST", body=body, headers={"Content-Type": "application/json"})
        self.assertEqual(st, 200)
        st, hd, _ = request(self.nodes[0] + "/eth/v2/beacon/pool/attestations", method="POST",
                            body=[{"bad": 1}],
                            headers={"Content-Type": "application/json",
                                     "Eth-Consensus-Version": "fulu"})
        self.assertEqual(st, 400)
        st, subs = get_json(self.control + "/sim/v1/nodes/0/submissions")
        self.assertEqual([s["route"] for s in subs["data"]],
                         ["prepareBeaconProposer", "submitPoolAttestationsV2"])
        self.assertEqual(subs["data"][0]["body"], body)
        self.assertEqual(subs["data"][1]["status"], 400)
        self.assertEqual(subs["data"][1]["headers"]["Eth-Consensus-Version"], "fulu")
        st, later = get_json(self.control + "/sim/v1/nodes/0/submissions?since=%d"
                             % subs["data"][0]["seq"])
        self.assertEqual(len(later["data"]), 1)

    def test_late_block_scenario(self):
        t = self.truth()
        s = t["current_slot"] + 2
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "late-block", "slot": s})
        self.assertEqual(st, 200, r)
        ts = self.truth(s)
        self.assertTrue(ts["late"] and ts["orphaned"])
        self.assertGreater(ts["late_ms"], ts["attestation_due_ms"] - ts["start_ms"])
        nxt = self.truth(s + 1)
        self.assertEqual(nxt["parent_root"], self.truth(s - 1)["root"])
        sse = SseReader(self.nodes[0], ["chain_reorg"])
        sleep_until(nxt["start_ms"] + 100)
        sse.wait(lambda x: b"event: chain_reorg" in x.body, 2, "the late block's re-org")
        sse.close()
        self.assertEqual(self.head_root(0), nxt["root"])
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "late-block", "slot": 1})
        self.assertEqual(st, 400)

    def test_competing_blocks(self):
        s = self.truth()["current_slot"] + 2
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "competing", "slot": s, "nodes": [0]})
        self.assertEqual(st, 200, r)
        ts = self.truth(s)
        self.assertTrue(ts["competing"])
        self.assertEqual(ts["alt_nodes"], [0])
        sleep_until(ts["start_ms"] + 150)
        st, a = get_json(self.nodes[0] + "/eth/v1/beacon/blocks/%d/root" % s)
        st, b = get_json(self.nodes[2] + "/eth/v1/beacon/blocks/%d/root" % s)
        self.assertEqual(a["data"]["root"], ts["alt_root"])
        self.assertEqual(b["data"]["root"], ts["root"])
        # the next block builds on the majority's block: node 0 re-orgs onto it
        nxt = self.truth(s + 1)
        self.assertEqual(nxt["parent_root"], ts["root"])
        sleep_until(nxt["start_ms"] + 150)
        self.assertEqual(self.head_root(0), nxt["root"])
        st, hd = get_json(self.nodes[0] + "/eth/v1/beacon/headers/" + nxt["root"])
        self.assertEqual(hd["data"]["header"]["message"]["parent_root"], ts["root"])

    def test_sse_drop(self):
        self.put_node(2, {"sse_drop": 1})
        sse = SseReader(self.nodes[2], ["head", "block"])
        sse.wait(lambda x: b"event: " in x.body and x.closed, 3, "a dropped stream")
        sse.close()
        self.put_node(2, {"sse_drop": 0})

    def test_sse_slow_starters(self):
        """sse-head-with-event: no response head before the first event, then both together;
        sse-first-event-late: nothing at all for that long, then the held events. Changing
        either ends the node's open streams."""
        before = SseReader(self.nodes[3], ["head"])
        before.wait(lambda x: x.head is not None, 2.5, "the head of a plain stream")
        self.put_node(3, {"sse_head_with_event": True, "sse_first_event_late": 1500})
        before.wait(lambda x: x.closed, 2, "the open stream ended by the change")
        before.close()
        host, port = self.nodes[3][7:].split(":")
        s = socket.create_connection((host, int(port)), timeout=5)
        try:
            t0 = time.time()
            s.sendall(b"GET /eth/v1/events?topics=head&topics=block HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(4)
            first = s.recv(65536)
            waited = time.time() - t0
            self.assertGreaterEqual(waited, 1.4, "bytes before the quiet start ended")
            self.assertTrue(first.startswith(b"HTTP/1.1 200"), first[:40])
            # the head left together with the events held meanwhile (one write)
            self.assertIn(b"event: ", first)
            self.assertNotIn(b"\r\n\r\n:", first)  # no comments
        finally:
            s.close()
        # without the quiet start: the head waits for the node's next event (the next block)
        self.put_node(3, {"sse_first_event_late": 0})
        s = socket.create_connection((host, int(port)), timeout=5)
        try:
            s.sendall(b"GET /eth/v1/events?topics=head HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(2.5)
            first = s.recv(65536)
            self.assertTrue(first.startswith(b"HTTP/1.1 200"), first[:40])
            self.assertIn(b"event: head", first)
        finally:
            s.close()
        self.put_node(3, {"sse_head_with_event": False})
        st, r = get_json(self.control + "/sim/v1/nodes/3")
        self.assertFalse(r["data"]["behaviour"]["sse_head_with_event"], r)
        self.assertEqual(r["data"]["behaviour"]["sse_first_event_late"], 0)

    def test_y_big_values(self):
        rv = "0xc0" + "00" * 95
        slot = self.truth()["current_slot"] + 1
        url = "/eth/v3/validator/blocks/%d?randao_reveal=%s" % (slot, rv)
        st, hd, body = request(self.nodes[0] + url)
        self.assertEqual(st, 200, body)
        small = int(hd["eth-execution-payload-value"])
        self.assertLess(small, 2 ** 63)
        st, hd2, body2 = request(self.nodes[2] + url)
        self.assertNotEqual(hd2["eth-execution-payload-value"], hd["eth-execution-payload-value"])
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "big-values", "enabled": True})
        self.assertEqual(st, 200)
        st, hd, body = request(self.nodes[0] + url)
        j = json.loads(body)
        self.assertGreater(int(hd["eth-execution-payload-value"]), 2 ** 64)
        self.assertGreater(int(hd["eth-consensus-block-value"]), 2 ** 63)
        self.assertEqual(j["execution_payload_value"], hd["eth-execution-payload-value"])
        self.assertEqual(j["data"]["block"]["slot"], str(slot))
        get_json(self.control + "/sim/v1/scenario", method="POST",
                 body={"type": "big-values", "enabled": False})

    def test_z_fork_transition(self):
        t = self.truth()
        e = t["current_epoch"] + 1
        st, spec = get_json(self.nodes[0] + "/eth/v1/config/spec")
        self.assertNotIn("GLOAS_FORK_EPOCH", spec["data"])
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "fork-transition", "epoch": e})
        self.assertEqual(st, 200, r)
        st, spec = get_json(self.nodes[0] + "/eth/v1/config/spec")
        self.assertEqual(spec["data"]["GLOAS_FORK_EPOCH"], str(e))
        self.assertEqual(spec["data"]["ATTESTATION_DUE_BPS_GLOAS"], "2500")
        st, fs = get_json(self.nodes[0] + "/eth/v1/config/fork_schedule")
        self.assertEqual(fs["data"][-1]["epoch"], str(e))
        first = e * t["slots_per_epoch"]
        sse = SseReader(self.nodes[0], ["head_v2", "execution_payload_available"])
        sleep_until(self.truth(first)["start_ms"] + 50)
        st, hd, body = request(self.nodes[0] + "/eth/v2/beacon/blocks/head")
        self.assertEqual(hd["eth-consensus-version"], "gloas")
        sse.wait(lambda x: b"execution_payload_available" in x.body, 2, "payload available")
        self.assertIn(b'"payload_status":"empty"', sse.body)
        sse.wait(lambda x: b'"payload_status":"full"' in x.body, 2, "head_v2 full")
        sse.close()
        st, r = get_json(self.control + "/sim/v1/scenario", method="POST",
                         body={"type": "fork-transition", "epoch": e + 5})
        self.assertEqual(st, 400)


if __name__ == "__main__":
    if not os.path.exists(SIM):
        print("beaconsim not built at " + SIM, file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
