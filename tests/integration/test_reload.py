# SPDX-License-Identifier: MIT
"""Reloading the configuration on SIGHUP: beaconmux in front of beaconsim's nodes.

The configuration file is rewritten and beaconmux is sent SIGHUP; what it did is read from
its status page, its log and each simulated node's submission log (the ground truth of
what reached a node). Every wait is a bounded poll of a condition, never a sleep.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (BIN_DIR, QUICK_NODES, Beaconmux, Beaconsim, HangServer, Proc,  # noqa: E402
                     closed_port, free_port, http_request, main, wait_for)
from test_listen_tls import client_ctx, make_pki  # noqa: E402

BASE = QUICK_NODES + """duties:
  writeTimeout: 3s
"""

FEE = lambda b: "0x" + ("%02x" % b) * 20  # noqa: E731


def upstreams(urls):
    return "upstreams:\n" + "".join("  - id: %s\n    url: %s\n" % (i, u) for i, u in urls)


class Reload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=3, slot_ms=1000, slots_per_epoch=8)
        cls.mux = Beaconmux(config_text=cls.config(0, 1))
        for n in ("n0", "n1"):
            cls.mux.wait_state(n, "ready", timeout=10)

    @classmethod
    def tearDownClass(cls):
        rc = cls.mux.stop()
        cls.sim.stop()
        assert rc == 0, "\n".join(cls.mux.stderr()[-40:])

    def setUp(self):
        for i in range(3):
            self.sim.put_node(i, {"down": False, "hang": False, "slow": 0})

    @classmethod
    def config(cls, *nodes, extra=""):
        return BASE + extra + upstreams([("n%d" % i, cls.sim.nodes[i]) for i in nodes])

    # ---- helpers ---------------------------------------------------------------------

    def write_config(self, text, mux=None):
        mux = mux or self.mux
        tmp = mux.config_path + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, mux.config_path)  # what an editor or a deploy tool does

    def log_mark(self, mux=None):
        return len((mux or self.mux).stderr())

    def wait_log(self, pattern, mark, mux=None, timeout=15.0):
        import re
        mux = mux or self.mux
        rx = re.compile(pattern)

        def find():
            for line in mux.stderr()[mark:]:
                if rx.search(line):
                    return line
            self.assertIsNone(mux.p.poll(), "beaconmux exited:\n" + "\n".join(mux.stderr()[-40:]))
            return None
        return wait_for(find, timeout, what="/%s/ in the log" % pattern)

    def reload(self, text, expect=r"reload: applied", mux=None, timeout=15.0):
        mux = mux or self.mux
        mark = self.log_mark(mux)
        self.write_config(text, mux)
        mux.signal(signal.SIGHUP)
        return self.wait_log(expect, mark, mux, timeout)

    def upstream_ids(self, mux=None):
        return [u["id"] for u in (mux or self.mux).status()["upstreams"]]

    def post(self, path, body, mux=None):
        return (mux or self.mux).request("POST", path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})

    def subs_since(self, i, mark, route):
        return [s for s in self.sim.submissions(i, since=mark)["data"] if s["route"] == route]

    def duty_read(self, mux=None):
        """An attestation data read for the current slot: (ok, detail)."""
        slot = self.sim.truth()["current_slot"]
        st, _, raw = (mux or self.mux).request(
            "GET", "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot,
            timeout=15)
        if st != 200:
            return False, "attestation_data %d %r" % (st, raw[:200])
        got = json.loads(raw)["data"]["slot"]
        return got == str(slot), "attestation_data for slot %d answered slot %s" % (slot, got)

    # ---- the tests ---------------------------------------------------------------------

    def test_a_broken_file_keeps_the_running_configuration(self):
        before = self.upstream_ids()
        st0 = self.mux.status()["reload"]
        text = self.config(0, 1) + "upstrem: 1\n"
        line = self.reload(text, expect=r"reload: .*unknown key.*the running configuration stays")
        # the position as --check gives it: file:line:col
        self.assertRegex(line, r"\.yaml:\d+:\d+: unknown key")
        self.assertEqual(self.upstream_ids(), before)
        st = self.mux.status()["reload"]  # the status page says so too
        self.assertEqual((st["last"], st["refused"], st["generation"]),
                         ("refused", st0["refused"] + 1, st0["generation"]))
        ok, detail = self.duty_read()
        self.assertTrue(ok, detail)
        # a file that parses but does not validate: refused the same way
        text = self.config(0, 1, extra="health:\n  headQuorum: 5\n")
        self.reload(text, expect=r"reload: .*headQuorum.*the running configuration stays")
        self.assertEqual(self.upstream_ids(), before)
        # the file back as it was: nothing to apply
        self.reload(self.config(0, 1), expect=r"reload: nothing changed")
        st = self.mux.status()["reload"]
        self.assertEqual((st["last"], st["unchanged"], st["generation"]),
                         ("unchanged", st0["unchanged"] + 1, st0["generation"]))

    def test_b_added_node_is_discovered_streamed_and_replayed(self):
        prep = [{"validator_index": str(v), "fee_recipient": FEE(0x70)} for v in (700, 701)]
        self.assertEqual(self.post("/eth/v1/validator/prepare_beacon_proposer", prep)[0], 200)
        mark = self.sim.submissions(2)["last_seq"]
        gen = self.mux.status()["reload"]["generation"]
        line = self.reload(self.config(0, 1, 2))
        st = self.mux.status()["reload"]
        self.assertEqual((st["last"], st["generation"]), ("applied", gen + 1))
        self.assertIn("request(s) finish on the networks it replaced", line)
        self.assertEqual(self.upstream_ids(), ["n0", "n1", "n2"])
        self.mux.wait_state("n2", "ready", timeout=10)
        wait_for(lambda: next(u for u in self.mux.status()["upstreams"]
                              if u["id"] == "n2")["stream"]["connected"], 10,
                 what="n2's event stream")

        def replayed():
            got = self.subs_since(2, mark, "prepareBeaconProposer")
            items = {p["validator_index"]: p["fee_recipient"] for s in got for p in s["body"]}
            return items if {"700", "701"} <= set(items) else None
        items = wait_for(replayed, 10, what="the preparations replayed to the added n2")
        self.assertEqual(items["700"], FEE(0x70))
        # and new writes reach it like every other node
        mark = self.sim.submissions(2)["last_seq"]
        prep = [{"validator_index": "702", "fee_recipient": FEE(0x72)}]
        self.assertEqual(self.post("/eth/v1/validator/prepare_beacon_proposer", prep)[0], 200)
        wait_for(lambda: any(p["validator_index"] == "702"
                             for s in self.subs_since(2, mark, "prepareBeaconProposer")
                             for p in s["body"]), 5, what="a new write on n2")
        self.reload(self.config(0, 1))
        self.assertEqual(self.upstream_ids(), ["n0", "n1"])

    def test_c_removed_node_with_requests_in_flight(self):
        self.reload(self.config(0, 1, 2))
        self.mux.wait_state("n2", "ready", timeout=10)
        # every node answers 400 ms late (within timeouts.read and the duty read's hold):
        # eight clients keep requests in flight, on n2 too, in waves of about 400 ms
        for i in range(3):
            self.sim.put_node(i, {"slow": 400})
        results = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(k):
            while not stop.is_set():
                if k % 2:
                    r = self.duty_read()
                else:
                    prep = [{"validator_index": str(710 + k), "fee_recipient": FEE(0x71)}]
                    st, _, raw = self.post("/eth/v1/validator/prepare_beacon_proposer", prep)
                    r = (st == 200, "prepare_beacon_proposer %d %r" % (st, raw[:200]))
                with lock:
                    results.append(r)
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(results) >= 8, 10, what="requests answered before the reload")
            # the next wave has reached the nodes (the four writes and the one read race the
            # reads share), each answer armed 400 ms late; then the nodes answer at once
            # again, so that the reload's new network settles within milliseconds while that
            # wave is in flight (its discovery asks the same nodes: slow, it was applied
            # 400 ms after the signal, just as the wave ended, and counted 0 in flight)
            wait_for(lambda: self.mux.upstreams()["n0"]["in_flight"] >= 4, 10,
                     what="a wave of requests in flight", interval=0.005)
            for i in range(3):
                self.sim.put_node(i, {"slow": 0})
            mark = self.log_mark()
            line = self.reload(self.config(0, 1))
            self.wait_log(r"reload: the network retired", mark)
            n = len(results)
            wait_for(lambda: len(results) >= n + 8, 10, what="requests after the reload")
        finally:
            stop.set()
            for t in threads:
                t.join(20)
        self.assertEqual([d for ok, d in results if not ok], [])
        self.assertEqual(self.upstream_ids(), ["n0", "n1"])
        # the log around the reload says what the requests did if none was in flight
        self.assertRegex(line, r"[1-9]\d* request\(s\) finish on the networks it replaced",
                         "\n".join(l for l in self.mux.stderr()[max(0, mark - 300):mark + 100]
                                   if " debug h1" not in l and " debug server conn" not in l))

    def test_d_reload_under_load_loses_nothing(self):
        stop = threading.Event()
        counts = {"read": 0, "write": 0, "other": 0}
        failures = []
        lock = threading.Lock()

        def worker(kind):
            v = 800 if kind == "write" else 0
            while not stop.is_set():
                if kind == "read":
                    ok, detail = self.duty_read()
                elif kind == "write":
                    v += 1
                    prep = [{"validator_index": str(v), "fee_recipient": FEE(0x80)}]
                    st, _, raw = self.post("/eth/v1/validator/prepare_beacon_proposer", prep)
                    ok, detail = st == 200, "prepare %d %r" % (st, raw[:200])
                else:
                    st, _, raw = self.mux.request("GET", "/eth/v1/node/version")
                    ok = st == 200 and b"version" in raw
                    detail = "version %d %r" % (st, raw[:200])
                with lock:
                    counts[kind] += 1
                    if not ok:
                        failures.append(detail)
        threads = [threading.Thread(target=worker, args=(k,))
                   for k in ("read", "read", "write", "other")]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: counts["read"] >= 10 and counts["write"] >= 5, 20, what="load")
            # a node added, a policy changed, a node removed, the edge changed: each live
            steps = [self.config(0, 1, 2),
                     self.config(0, 1, 2, extra="failsafe:\n  timeout: 5s\n"),
                     self.config(0, 2, extra="failsafe:\n  timeout: 5s\n"),
                     self.config(0, 2, extra="rateLimit:\n  perClient: {rate: 5000, burst: 5000}\n"),
                     self.config(0, 1)]
            for text in steps:
                before = dict(counts)
                self.reload(text)
                wait_for(lambda: counts["read"] > before["read"] + 3 and
                         counts["write"] > before["write"] + 2, 20, what="load after a reload")
        finally:
            stop.set()
            for t in threads:
                t.join(20)
        sys.stderr.write("reload under load: %r requests, failures %d\n" % (counts, len(failures)))
        self.assertEqual(failures, [])
        self.assertGreater(counts["read"], 20)
        self.assertGreater(counts["write"], 10)

    def test_e_second_sighup_during_a_reload(self):
        hang = HangServer()  # a node that never answers keeps the reload settling
        try:
            text = BASE + upstreams([("n0", self.sim.nodes[0]), ("n1", self.sim.nodes[1]),
                                     ("hung", hang.url)])
            mark = self.log_mark()
            self.write_config(text)
            self.mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: .*network.*(rebuilt|added)", mark)
            self.mux.signal(signal.SIGHUP)
            self.mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: one is running; another follows", mark)
            self.wait_log(r"reload: applied", mark, timeout=20)
            # the signals that came meanwhile made one more reload, of the same file
            self.wait_log(r"reload: the signal that came meanwhile reloads again", mark)
            self.wait_log(r"reload: nothing changed", mark, timeout=20)
            reads = [l for l in self.mux.stderr()[mark:] if "reload: reading" in l]
            self.assertEqual(len(reads), 2, reads)
            self.assertEqual(self.upstream_ids(), ["n0", "n1", "hung"])
            ok, detail = self.duty_read()
            self.assertTrue(ok, detail)
        finally:
            self.reload(self.config(0, 1))
            hang.stop()

    def test_f_sigterm_during_a_reload_exits_cleanly(self):
        hang = HangServer()
        mux = Beaconmux(config_text=self.config(0))
        try:
            mux.wait_state("n0", "ready", timeout=10)
            text = BASE + upstreams([("n0", self.sim.nodes[0]), ("hung", hang.url)])
            mark = self.log_mark(mux)
            self.write_config(text, mux)
            mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: .*network.*rebuilt", mark, mux)
            rc = mux.stop()
            log = mux.stderr()[mark:]
            self.assertEqual(rc, 0, "\n".join(log[-40:]))
            self.assertTrue(any("reload: abandoned (shutting down)" in l for l in log), log)
            self.assertFalse(any("reload: applied" in l for l in log), log)
            self.assertFalse(any("ERROR: AddressSanitizer" in l or "LeakSanitizer" in l
                                 for l in log), log)
        finally:
            mux.stop()
            hang.stop()

    def test_g_listener_and_server_limits_change_live(self):
        # the listen address from the file (the harness's --listen would override it)
        tmp = os.path.join(os.path.dirname(self.mux.config_path), "reload-listen-%d.yaml" % os.getpid())
        text = BASE + 'listen: "127.0.0.1:0"\n' + upstreams([("n0", self.sim.nodes[0])])
        with open(tmp, "w") as f:
            f.write(text)
        mux = Proc([os.path.join(BIN_DIR, "beaconmux"), "--config", tmp, "--log-level", "debug"])
        try:
            old = int(mux.wait_line(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
            wait_for(lambda: json.loads(http_request(old, "GET", "/beaconmux/v1/status")[2])
                     ["upstreams"][0]["state"] == "ready", 10, what="n0 ready")
            self.sim.put_node(0, {"slow": 600})
            answer = []
            slot = self.sim.truth()["current_slot"]
            path = "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot
            op = "produceAttestationData"
            before = self.sim.requests(0)["data"].get(op, 0)
            t = threading.Thread(target=lambda: answer.append(http_request(old, "GET", path)))
            t.start()
            wait_for(lambda: self.sim.requests(0)["data"].get(op, 0) > before, 5,
                     what="the read in flight at n0")
            new = closed_port()
            mark = len(mux.stderr())
            with open(tmp + ".new", "w") as f:
                f.write(text.replace("127.0.0.1:0", "127.0.0.1:%d" % new) +
                        "server: {maxBodyBytes: 4096}\n")
            os.replace(tmp + ".new", tmp)
            mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: applied", mark, mux)
            self.wait_log(r"listening on http://127\.0\.0\.1:%d" % new, mark, mux)
            t.join(10)
            # the request in flight on the old listener was answered there
            self.assertEqual(answer[0][0], 200, answer)
            self.assertEqual(json.loads(answer[0][2])["data"]["slot"], str(slot))
            self.sim.put_node(0, {"slow": 0})
            self.wait_log(r"previous listener's connections are done", mark, mux)
            with self.assertRaises(ConnectionRefusedError):
                http_request(old, "GET", "/eth/v1/node/version")
            self.assertEqual(http_request(new, "GET", "/eth/v1/node/version")[0], 200)
            # the new body limit applies
            big = json.dumps([{"validator_index": "1", "fee_recipient": FEE(1)}] * 100).encode()
            self.assertGreater(len(big), 4096)
            st, _, raw = http_request(new, "POST", "/eth/v1/validator/prepare_beacon_proposer",
                                      big, {"Content-Type": "application/json"})
            self.assertEqual(st, 413, raw)
            self.assertEqual(mux.stop(), 0, "\n".join(mux.stderr()[-30:]))
        finally:
            mux.stop()
            os.unlink(tmp)

    def test_h_event_stream_subscribers(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.mux.port, timeout=10)
        conn.request("GET", "/eth/v1/events?topics=head")
        r = conn.getresponse()
        self.assertEqual(r.status, 200)

        def next_head():
            while True:
                line = r.readline()  # the body, chunked framing removed
                if not line:
                    return None  # the stream ended
                if line.startswith(b"event: head"):
                    return line
        try:
            self.assertIsNotNone(next_head())
            # the network is kept (only the front changes): the stream goes on
            self.reload(self.config(0, 1, extra="rateLimit:\n  perClient: {rate: 9000, burst: 9000}\n"))
            self.assertIsNotNone(next_head())
            self.assertIsNotNone(next_head())
            # the network is replaced: the stream ends cleanly, a new one serves the new network
            mark = self.log_mark()
            self.reload(self.config(0, 1, 2))
            while next_head() is not None:  # bounded by the connection's 10 s timeout
                pass
            self.wait_log(r"reload: the network retired", mark)
        finally:
            conn.close()
        self.reload(self.config(0, 1))

    def networks(self, *nets):
        """A `networks:` file: (id, node indexes, extra keys of the entry) each."""
        out = BASE + "networks:\n"
        for nid, nodes, extra in nets:
            out += "  - id: %s\n    upstreams:\n" % nid
            out += "".join("      - {id: %s-n%d, url: \"%s\"}\n" % (nid, i, self.sim.nodes[i])
                           for i in nodes)
            out += extra
        return out

    def test_i_networks_added_changed_removed(self):
        mux = Beaconmux(config_text=self.networks(("main", (0, 1), "")))
        try:
            wait_for(lambda: mux.request("GET", "/main/eth/v1/node/version")[0] == 200, 10,
                     what="main served")
            self.assertEqual(mux.request("GET", "/hoodi/eth/v1/node/version")[0], 404)
            mark = self.log_mark(mux)
            self.reload(self.networks(("main", (0, 1), ""), ("hoodi", (2,), "")), mux=mux)
            line = self.wait_log(r"reload: network hoodi: added", mark, mux)
            self.assertNotIn("main", line)  # unchanged: kept as it runs
            self.wait_log(r"network hoodi: served under /hoodi/", mark, mux)
            self.assertEqual(mux.request("GET", "/hoodi/eth/v1/node/version")[0], 200)
            slot = self.sim.truth()["current_slot"]
            st, _, raw = mux.request(
                "GET", "/hoodi/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot)
            self.assertEqual((st, json.loads(raw)["data"]["slot"]), (200, str(slot)), raw)
            # hoodi's policy changes: only hoodi is rebuilt; main is removed
            mark = self.log_mark(mux)
            self.reload(self.networks(("hoodi", (2,), "    failsafe: {timeout: 5s}\n")), mux=mux)
            line = self.wait_log(r"reload: network hoodi: rebuilt; network main: removed", mark,
                                 mux)
            self.wait_log(r"reload: network main retired", mark, mux)
            self.wait_log(r"reload: network hoodi retired", mark, mux)
            self.assertEqual(mux.request("GET", "/main/eth/v1/node/version")[0], 404)
            self.assertEqual(mux.request("GET", "/hoodi/eth/v1/node/version")[0], 200)
            self.assertEqual(mux.stop(), 0, "\n".join(mux.stderr()[-30:]))
        finally:
            mux.stop()

    def test_j_sigterm_while_a_replaced_network_finishes(self):
        mux = Beaconmux(config_text=self.config(0, 1, 2))
        try:
            for n in ("n0", "n1", "n2"):
                mux.wait_state(n, "ready", timeout=10)
            for i in range(3):
                self.sim.put_node(i, {"slow": 400})
            results, refused = [], []
            stop = threading.Event()

            def write(mux):
                # a broadcast answers with the first node's 2xx: each one waits on a slow node
                # (a duty read may be answered at once from what the cluster already agreed)
                body = [{"validator_index": "9", "fee_recipient": FEE(9)}]
                st, _, raw = self.post("/eth/v1/validator/prepare_beacon_proposer", body, mux)
                return st == 200, "prepare_beacon_proposer %d %r" % (st, raw[:200])

            def client(op):
                while not stop.is_set():
                    try:
                        results.append(op(mux))
                    except ConnectionRefusedError:
                        refused.append(1)  # sent after the listener closed: never in flight
            threads = [threading.Thread(target=client, args=(op,))
                       for op in (self.duty_read, write) * 3]
            for t in threads:
                t.start()
            wait_for(lambda: len(results) >= 6, 10, what="reads answered before the reload")
            # a write is in flight (a node took it and holds it 400 ms) when the reload comes:
            # the reads alone may all be answered, and on a loaded machine the writers' threads
            # may not have sent yet
            def writes_seen():
                return sum(self.sim.requests(i)["data"].get("prepareBeaconProposer", 0)
                           for i in range(3))
            before = writes_seen()
            wait_for(lambda: writes_seen() > before, 10, what="a write reaching a node")
            line = self.reload(self.config(0, 1), mux=mux)
            stop.set()
            rc = mux.stop()  # at once: the replaced network still has requests in flight
            for t in threads:
                t.join(15)
            self.assertEqual(rc, 0, "\n".join(mux.stderr()[-40:]))
            self.assertEqual([d for ok, d in results if not ok], [])
            self.assertRegex(line, r"[1-9]\d* request\(s\) finish on the networks it replaced")
        finally:
            mux.stop()

    # ---- observe across generations (sanitizer builds catch a use of a freed network) -----

    def scrape(self, port, path):
        st, _, body = http_request(port, "GET", path)
        return st, body.decode(errors="replace")

    def assert_exposes(self, port, path, present, absent=()):
        """`path` on `port` answers 200 with every text of `present` and none of `absent`."""
        st, text = self.scrape(port, path)
        self.assertEqual(st, 200, text[:300])
        for p in present:
            self.assertTrue(p in text, "%s lacks %s" % (path, p))
        for p in absent:
            self.assertFalse(p in text, "%s still shows %s" % (path, p))
        return text

    def test_k_metrics_follow_networks_and_nodes(self):
        mux = Beaconmux(config_text=self.networks(("main", (0, 1), "")))
        try:
            wait_for(lambda: mux.request("GET", "/main/eth/v1/node/version")[0] == 200, 10,
                     what="main served")
            up = 'upstream="%s",state="unknown"'  # beaconmux_upstream_state's
            self.assert_exposes(mux.port, "/main/metrics", [up % "main-n0", up % "main-n1"],
                                [up % "main-n2"])
            # a network added: two networks, one merged /metrics on the API listener
            self.reload(self.networks(("main", (0, 1), ""), ("hoodi", (2,), "")), mux=mux)
            self.assert_exposes(mux.port, "/metrics", ['network="main"', 'network="hoodi"',
                                                       up % "hoodi-n2"])
            self.assert_exposes(mux.port, "/hoodi/metrics", [up % "hoodi-n2"], [up % "main-n0"])
            # a node added to main: main rebuilt; scrapes while the old main retires
            mark = self.log_mark(mux)
            self.reload(self.networks(("main", (0, 1, 2), ""), ("hoodi", (2,), "")), mux=mux)
            retired = [False]

            def scraped_until_retired():
                self.assert_exposes(mux.port, "/main/metrics", [up % "main-n2"])
                self.assert_exposes(mux.port, "/metrics", [up % "main-n2", 'network="hoodi"'])
                retired[0] = retired[0] or any("reload: network main retired" in l
                                               for l in mux.stderr()[mark:])
                return retired[0]
            wait_for(scraped_until_retired, 15, what="the old main retired")
            self.assert_exposes(mux.port, "/main/metrics", [up % "main-n2"])
            # hoodi replaced by sepolia: the merged /metrics lists the current networks only
            mark = self.log_mark(mux)
            self.reload(self.networks(("main", (0, 1, 2), ""), ("sepolia", (1,), "")), mux=mux)
            self.wait_log(r"reload: network hoodi retired", mark, mux)
            self.assert_exposes(mux.port, "/metrics",
                                ['network="sepolia"', up % "sepolia-n1", up % "main-n2"],
                                ['network="hoodi"', up % "hoodi-n2"])
            self.assert_exposes(mux.port, "/sepolia/metrics", [up % "sepolia-n1"])
            self.assertEqual(mux.request("GET", "/hoodi/metrics")[0], 404)
            # the front's counters in the exposition are the new front's: it answered that 404
            self.assertRegex(self.scrape(mux.port, "/metrics")[1],
                             r'beaconmux_edge_refused_total\{[^}]*reason="unknown_network"[^}]*\} [1-9]')
            self.assertEqual(mux.stop(), 0, "\n".join(mux.stderr()[-30:]))
        finally:
            mux.stop()

    def test_l_metrics_listener_across_reloads_and_a_rebind(self):
        """metrics.listen keeps serving the current generation: one network's routes, then
        every network's /metrics, across a move of the API listener; then metrics.listen
        itself moves."""
        mport = free_port()
        ml = 'metrics:\n  listen: "127.0.0.1:%d"\n' % mport
        tmp = os.path.join(os.path.dirname(self.mux.config_path),
                           "reload-metrics-%d.yaml" % os.getpid())
        text = BASE + ml + 'listen: "127.0.0.1:0"\n'
        with open(tmp, "w") as f:
            f.write(text + upstreams([("n0", self.sim.nodes[0])]))
        mux = Proc([os.path.join(BIN_DIR, "beaconmux"), "--config", tmp, "--log-level", "debug"])
        up = 'upstream="%s",state="unknown"'  # beaconmux_upstream_state's
        try:
            old = int(mux.wait_line(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
            self.assert_exposes(mport, "/metrics", [up % "n0"], [up % "n1"])
            # a node added, and the API listener moves
            new = closed_port()
            mark = len(mux.stderr())
            with open(tmp + ".new", "w") as f:
                f.write(text.replace("127.0.0.1:0", "127.0.0.1:%d" % new) +
                        upstreams([("n0", self.sim.nodes[0]), ("n1", self.sim.nodes[1])]))
            os.replace(tmp + ".new", tmp)
            mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: applied", mark, mux)
            self.wait_log(r"previous listener's connections are done", mark, mux)
            self.assert_exposes(mport, "/metrics", [up % "n0", up % "n1"])
            self.assertEqual(http_request(new, "GET", "/eth/v1/node/version")[0], 200)
            self.assert_exposes(mport, "/metrics", ["beaconmux_"])
            self.assertNotEqual(old, new)
            # one network becomes two: the listener shows both, merged
            mark = len(mux.stderr())
            with open(tmp + ".new", "w") as f:
                f.write(self.networks(("main", (0,), ""), ("hoodi", (1,), "")) + ml +
                        'listen: "127.0.0.1:%d"\n' % new)
            os.replace(tmp + ".new", tmp)
            mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: applied", mark, mux)
            self.wait_log(r"reload: the network retired", mark, mux)
            self.assert_exposes(mport, "/metrics", ['network="main"', 'network="hoodi"',
                                                    up % "hoodi-n1"], [up % "n0"])
            # metrics.listen moves: the new address serves, the old listener drains and closes
            mport2 = free_port()
            mark = len(mux.stderr())
            with open(tmp + ".new", "w") as f:
                f.write(self.networks(("main", (0,), ""), ("hoodi", (1,), "")) +
                        'metrics:\n  listen: "127.0.0.1:%d"\n' % mport2 +
                        'listen: "127.0.0.1:%d"\n' % new)
            os.replace(tmp + ".new", tmp)
            mux.signal(signal.SIGHUP)
            self.wait_log(r"metrics on http://127\.0\.0\.1:%d/metrics" % mport2, mark, mux)
            self.wait_log(r"previous listener's connections are done", mark, mux)
            self.assert_exposes(mport2, "/metrics", ['network="main"', 'network="hoodi"'])
            with self.assertRaises(ConnectionRefusedError):
                http_request(mport, "GET", "/metrics")
            self.assertEqual(mux.stop(), 0, "\n".join(mux.stderr()[-30:]))
        finally:
            mux.stop()
            os.unlink(tmp)
    @unittest.skipUnless(shutil.which("openssl"), "openssl CLI needed to make test certificates")
    def test_m_tls_listener_moves_live(self):
        """server.tls.listen changes on SIGHUP like listen: the new address is bound first,
        a request in flight on the old one is answered there, then the old one closes; the
        listener can be removed, and one that cannot be bound leaves things as they were."""
        pki_dir = tempfile.mkdtemp(prefix="bm-reload-tls-")
        self.addCleanup(shutil.rmtree, pki_dir, True)
        pki = make_pki(pki_dir)
        tmp = os.path.join(pki_dir, "reload-tls.yaml")
        tls = ('server:\n  tls:\n    listen: "127.0.0.1:%d"\n    certFile: %s\n    keyFile: %s\n'
               % (0, pki["srv.crt"], pki["srv.key"]))
        text = BASE + 'listen: "127.0.0.1:0"\n' + upstreams([("n0", self.sim.nodes[0])])

        def write(extra):
            with open(tmp + ".new", "w") as f:
                f.write(text + extra)
            os.replace(tmp + ".new", tmp)

        def https(port, path="/eth/v1/node/version"):
            c = http.client.HTTPSConnection("127.0.0.1", port, context=client_ctx(pki),
                                            timeout=10)
            try:
                c.request("GET", path)
                r = c.getresponse()
                return r.status, r.read()
            finally:
                c.close()

        write(tls)
        mux = Proc([os.path.join(BIN_DIR, "beaconmux"), "--config", tmp, "--log-level", "debug"])
        try:
            old = int(mux.wait_line(r"listening on https://127\.0\.0\.1:(\d+)").group(1))
            plain = int(mux.wait_line(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
            wait_for(lambda: json.loads(http_request(plain, "GET", "/beaconmux/v1/status")[2])
                     ["upstreams"][0]["state"] == "ready", 10, what="n0 ready")
            self.assertEqual(https(old)[0], 200)
            # a duty read in flight on the old TLS listener while it moves
            self.sim.put_node(0, {"slow": 600})
            slot = self.sim.truth()["current_slot"]
            path = "/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % slot
            op = "produceAttestationData"
            before = self.sim.requests(0)["data"].get(op, 0)
            answer = []
            t = threading.Thread(target=lambda: answer.append(https(old, path)))
            t.start()
            wait_for(lambda: self.sim.requests(0)["data"].get(op, 0) > before, 5,
                     what="the read in flight at n0")
            new = closed_port()
            mark = len(mux.stderr())
            write(tls.replace("127.0.0.1:0", "127.0.0.1:%d" % new))
            mux.signal(signal.SIGHUP)
            self.wait_log(r"listening on https://127\.0\.0\.1:%d" % new, mark, mux)
            self.wait_log(r"reload: applied", mark, mux)
            t.join(10)
            self.assertEqual(answer[0][0], 200, answer)  # answered on the old listener
            self.assertEqual(json.loads(answer[0][1])["data"]["slot"], str(slot))
            self.sim.put_node(0, {"slow": 0})
            self.wait_log(r"previous listener's connections are done", mark, mux)
            with self.assertRaises(ConnectionRefusedError):
                https(old)
            self.assertEqual(https(new)[0], 200)

            # removed: the TLS listener closes, the plain one serves on
            mark = len(mux.stderr())
            write("")
            mux.signal(signal.SIGHUP)
            self.wait_log(r"server.tls.listen removed: the TLS listener closes", mark, mux)
            self.wait_log(r"previous listener's connections are done", mark, mux)
            with self.assertRaises(ConnectionRefusedError):
                https(new)

            # an address that cannot be bound: nothing changes, logged
            held = socket.socket()
            held.bind(("127.0.0.1", 0))
            held.listen(1)
            self.addCleanup(held.close)
            mark = len(mux.stderr())
            write(tls.replace("127.0.0.1:0", "127.0.0.1:%d" % held.getsockname()[1]))
            mux.signal(signal.SIGHUP)
            self.wait_log(r"reload: the TLS listener stays as it was", mark, mux)
            self.assertEqual(http_request(plain, "GET", "/eth/v1/node/version")[0], 200)
            self.assertEqual(mux.stop(), 0, "\n".join(mux.stderr()[-30:]))
        finally:
            self.sim.put_node(0, {"slow": 0})
            mux.stop()

    def test_n_rebuilt_network_keeps_sticky_clients_and_ssz_refusals(self):
        """A reload that rebuilds the network (a node added) keeps what the old one learnt of
        its clients and nodes: each client still reads from the node it stuck to, and a node
        known to refuse SSZ is not asked again (the client gets 415 at once)."""
        sticky = ("routing:\n  stickySessions: {enabled: true, key: X-Client, "
                  "rebalanceFactor: 10}\n")
        self.sim.put_node(1, {"no_ssz": True})
        self.addCleanup(self.sim.put_node, 1, {"no_ssz": False})
        self.reload(self.config(0, 1, extra=sticky))
        for n in ("n0", "n1"):
            self.mux.wait_state(n, "ready", timeout=10)
        route = "/eth/v1/beacon/states/head/finality_checkpoints"
        clients = ["client-%d" % k for k in range(6)]

        def read_all():
            """Every client reads three times; returns {client: node index it was read from}."""
            where = {}
            for c in clients:
                for _ in range(3):
                    before = [self.sim.requests(i)["data"].get("getStateFinalityCheckpoints", 0)
                              for i in range(3)]
                    st, _, raw = self.mux.request("GET", route, headers={
                        "X-Client": c, "Cache-Control": "no-cache"})
                    self.assertEqual(st, 200, raw)
                    after = [self.sim.requests(i)["data"].get("getStateFinalityCheckpoints", 0)
                             for i in range(3)]
                    asked = [i for i in range(3) if after[i] > before[i]]
                    self.assertEqual(len(asked), 1, (c, before, after))
                    self.assertEqual(where.setdefault(c, asked[0]), asked[0], c)
            return where
        stuck = read_all()
        self.assertEqual(self.mux.status()["read_path"]["sticky_clients"], len(clients))
        reg = (bytes([9]) * 20 + (30000000).to_bytes(8, "little") +
               (1700000000).to_bytes(8, "little") + bytes([9]) * 48 + b"\xcc" * 96)
        ssz = {"Content-Type": "application/octet-stream"}
        st, _, _ = self.mux.request("POST", "/eth/v1/validator/register_validator", reg, ssz)
        self.assertEqual(st, 415)  # n1 refused it: learnt now

        mark = self.log_mark()
        self.reload(self.config(0, 1, 2, extra=sticky))
        self.wait_log(r"reload: .*network.*rebuilt", mark)
        status = self.mux.status()
        self.assertEqual(status["read_path"]["sticky_clients"], len(clients), status["read_path"])
        for n in ("n0", "n1", "n2"):
            self.mux.wait_state(n, "ready", timeout=10)
        mark1 = self.sim.submissions(1)["last_seq"]
        st, _, _ = self.mux.request("POST", "/eth/v1/validator/register_validator", reg, ssz)
        self.assertEqual(st, 415)
        self.assertEqual(self.mux.status()["broadcast"]["ssz_refused_at_once"], 1)
        self.assertEqual(self.subs_since(1, mark1, "registerValidator"), [])  # not asked again
        self.assertEqual(read_all(), stuck)
        self.reload(self.config(0, 1))

    def test_o_memory_trim_interval_follows_the_file(self):
        """server.memoryTrimInterval: the default once a minute, a new interval applied on
        SIGHUP (its trims then come at that pace), 0 turns the trims off."""
        memory = lambda: self.mux.status()["memory"]  # noqa: E731
        self.assertEqual(memory()["trim_interval_ms"], 60000)
        self.reload(self.config(0, 1, extra="server:\n  memoryTrimInterval: 100ms\n"))
        self.assertEqual(memory()["trim_interval_ms"], 100)
        before = memory()["trims"]
        wait_for(lambda: memory()["trims"] >= before + 3, 10, what="three trims at 100 ms")
        m = memory()  # one snapshot: a trim between two reads could raise last above max
        self.assertGreaterEqual(m["max_trim_us"], m["last_trim_us"])
        self.reload(self.config(0, 1, extra="server:\n  memoryTrimInterval: 0\n"))
        self.assertEqual(memory()["trim_interval_ms"], 0)
        self.reload(self.config(0, 1))
        self.assertEqual(memory()["trim_interval_ms"], 60000)


if __name__ == "__main__":
    main()
