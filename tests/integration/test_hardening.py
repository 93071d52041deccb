# SPDX-License-Identifier: MIT
"""Hardening (issue 12): what an attacker and a broken node found, end to end.

Requests beaconmux refuses itself (a GET with a body, targets no node could be asked), and
nodes that answer what HTTP does not allow: a 101 nobody asked for followed by bytes, a
Content-Length that cannot be, a body shorter than announced, a chunked body cut short. Each
node-side case runs against an http:// node (the native client) and an https:// node
(libcurl): both transports must turn the broken answer into that node's failure (the next
node is asked while nothing reached the client; the client's connection is cut after),
never into a complete-looking answer or silence.
"""
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Beaconmux, FakeBeacon, count_responses, main, raw_exchange,  # noqa: E402
                     self_signed_cert, wait_for)

GOOD = b'{"data":{"answer":"good"}}'


def raw_route(raw):
    """A FakeBeacon route that writes `raw` as the whole answer and closes."""
    def route(handler, rec):
        handler.wfile.write(raw)
        handler.wfile.flush()
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return None
    return route


def drip_route(head, first, seconds=20.0):
    """A FakeBeacon route that writes `head` and `first` at once, then one more body byte every
    50 ms (a node dripping its answer) until the connection breaks or `seconds` pass."""
    def route(handler, rec):
        end = time.monotonic() + seconds
        try:
            handler.wfile.write(head + first)
            handler.wfile.flush()
            while time.monotonic() < end:
                time.sleep(0.05)  # the node's pace, not a wait for the test
                handler.wfile.write(b"x")
                handler.wfile.flush()
        except OSError:
            pass
        handler.close_connection = True
        return None
    return route


DRIP_BIG = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2100000\r\n\r\n"
DRIP_SMALL = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
DRIP_RULES = ("routeRules:\n  - path: /eth/v1/beacon/states/head/dripstream\n    timeout: 1s\n"
              "  - path: /eth/v1/beacon/states/head/dripheld\n    timeout: 1s\n")


def sent_by_test(node):
    """What a node was asked ("METHOD path"), less the GETs beaconmux's own discovery and
    monitor send (identity, spec, genesis, heads, events, a state's finality checkpoints)."""
    def own(r):
        p = r["path"]
        return r["method"] == "GET" and (
            p.startswith(("/eth/v1/node/", "/eth/v1/config/", "/eth/v1/beacon/genesis",
                          "/eth/v1/beacon/headers", "/eth/v1/events")) or
            (p.startswith("/eth/v1/beacon/states/0x") and p.endswith("/finality_checkpoints")))
    with node.lock:
        return ["%s %s" % (r["method"], r["path"]) for r in node.requests if not own(r)]


def good_route(handler, rec):
    return 200, {"Content-Type": "application/json"}, GOOD


class Refusals(unittest.TestCase):
    """What beaconmux answers 400 itself, without asking any node."""

    def setUp(self):
        self.node = FakeBeacon()
        self.node.routes[("*", "/eth/v1/x_test/fork")] = good_route
        self.mux = Beaconmux(upstreams=[self.node.url])
        self.mux.wait_state("node1", "ready")

    def tearDown(self):
        self.mux.stop()
        self.node.stop()

    def asked(self):
        return sent_by_test(self.node)

    def test_get_or_head_with_a_body_is_refused(self):
        for method in ("GET", "HEAD"):
            raw = raw_exchange(self.mux.port, (
                "%s /eth/v1/x_test/fork HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
                "\r\n{\"a\":1}" % method).encode())
            self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
            if method == "GET":
                self.assertIn(b"must not have a body", raw)
        raw = raw_exchange(self.mux.port, b"GET /eth/v1/x_test/fork HTTP/1.1\r\n"
                           b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
        self.assertEqual(self.asked(), [])
        # an empty body is no body: served
        st, _, body = self.mux.request("GET", "/eth/v1/x_test/fork", body=b"")
        self.assertEqual((st, body), (200, GOOD))

    def test_targets_no_node_could_be_asked_are_400(self):
        for target in ("http://127.0.0.1/eth/v1/x_test/fork", "*",
                       "/eth/v1/../../lighthouse/database/reconstruct", "/eth/%2e%2e/x",
                       "/eth/v1/beacon/states/head/./fork", "/a%zz", "/caf\xc3\xa9"):
            with self.subTest(target=target):
                raw = raw_exchange(self.mux.port, b"GET " + target.encode("latin-1") +
                                   b" HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
                body = raw.split(b"\r\n\r\n", 1)[1]
                self.assertEqual(json.loads(body)["code"], 400)
        self.assertEqual(self.asked(), [])


class AdminRoutes(unittest.TestCase):
    """The nodes' own admin routes are closed by default (blockedPaths' default), a
    configured blockedPaths replaces that list, and beaconmux's own routes take GET only:
    none of these requests reaches a node."""

    CLOSED = [("POST", "/lighthouse/database/reconstruct"), ("GET", "/lighthouse/database/info"),
              ("GET", "/lighthouse/logging"), ("POST", "/lighthouse/add_peer"),
              ("POST", "/eth/v1/keystores"), ("DELETE", "/eth/v1/keystores"),
              ("GET", "/eth/v1/remotekeys"), ("POST", "/eth/v1/validator/0xab/voluntary_exit"),
              ("POST", "/eth/v1/validator/0xab/feerecipient"), ("PUT", "/teku/v1/admin/log_level"),
              ("POST", "/eth/v1/lodestar/write_heapdump"), ("GET", "/%6cighthouse/logging")]

    def setUp(self):
        self.node = FakeBeacon()
        self.node.routes[("*", "/eth/v2/debug/beacon/states/finalized")] = good_route
        self.node.routes[("*", "/lighthouse/database/info")] = good_route

    def tearDown(self):
        self.node.stop()

    def asked(self):
        return sent_by_test(self.node)

    def test_admin_routes_closed_by_default(self):
        mux = Beaconmux(upstreams=[self.node.url])
        try:
            mux.wait_state("node1", "ready")
            for method, path in self.CLOSED:
                with self.subTest(method=method, path=path):
                    st, _, body = mux.request(method, path, body=b"{}" if method != "GET" else None)
                    self.assertEqual((st, json.loads(body)["code"]), (403, 403), body)
            self.assertEqual(self.asked(), [])
            # checkpoint sync's read stays open
            st, _, body = mux.request("GET", "/eth/v2/debug/beacon/states/finalized")
            self.assertEqual((st, body), (200, GOOD))
        finally:
            mux.stop()

    def test_configured_list_replaces_the_default(self):
        mux = Beaconmux(config_text="blockedPaths: []\nupstreams:\n  - url: %s\n" % self.node.url)
        try:
            mux.wait_state("node1", "ready")
            st, _, body = mux.request("GET", "/lighthouse/database/info")
            self.assertEqual((st, body), (200, GOOD))
        finally:
            mux.stop()

    def test_own_routes_take_get_only(self):
        mux = Beaconmux(upstreams=[self.node.url])
        try:
            mux.wait_state("node1", "ready")
            for method, path in (("POST", "/beaconmux/v1/status"), ("POST", "/healthz"),
                                 ("DELETE", "/beaconmux/v1/status"), ("POST", "/eth/v1/node/health"),
                                 ("POST", "/eth/v1/config/spec")):
                with self.subTest(method=method, path=path):
                    st, h, body = mux.request(method, path, body=b"{}")
                    self.assertEqual((st, json.loads(body)["code"]), (405, 405), body)
                    self.assertEqual(h.get("allow"), "GET")
            for path in ("/beaconmux/v1/nothing", "/beaconmux/x"):
                st, _, body = mux.request("GET", path)
                self.assertEqual((st, json.loads(body)["code"]), (404, 404), body)
            self.assertEqual(self.asked(), [])
            self.assertEqual(mux.request("GET", "/beaconmux/v1/status")[0], 200)
        finally:
            mux.stop()


class ForwardedFor(unittest.TestCase):
    """A client's X-Forwarded-For never reaches a node; beaconmux tells the client's address
    only to a node with upstreams[].forwardedFor."""

    def seen(self, opt_in):
        node = FakeBeacon()
        node.routes[("*", "/eth/v1/node/version_x")] = good_route
        extra = "    forwardedFor: true\n" if opt_in else ""
        mux = Beaconmux(config_text="upstreams:\n  - url: %s\n%s" % (node.url, extra))
        try:
            mux.wait_state("node1", "ready")
            st, _, body = mux.request("GET", "/eth/v1/node/version_x",
                                      headers={"X-Forwarded-For": "10.9.9.9",
                                               "X-Real-IP": "10.9.9.9"})
            self.assertEqual((st, body), (200, GOOD))
            recs = node.find("GET", "/eth/v1/node/version_x")
            self.assertEqual(len(recs), 1)
            return recs[0]["raw_headers"]
        finally:
            mux.stop()
            node.stop()

    def test_client_address_only_to_nodes_that_opt_in(self):
        plain = self.seen(False)
        self.assertEqual([v for k, v in plain if k in ("x-forwarded-for", "x-real-ip")], [])
        told = self.seen(True)
        self.assertEqual([v for k, v in told if k in ("x-forwarded-for", "x-real-ip")],
                         ["127.0.0.1"])


class SendTimeout(unittest.TestCase):
    """A client that stops reading a large answer is cut after server.sendTimeout, and the
    upstream transfer that fed it is released (before: pinned for ever)."""

    def test_never_reading_client_is_cut_and_its_transfer_released(self):
        node = FakeBeacon()
        big = b"[" + b"1," * (32 << 20) + b"1]"  # 64 MiB of JSON
        node.routes[("GET", "/eth/v2/debug/beacon/states/head")] = (
            200, {"Content-Type": "application/json"}, big)
        # without the cache: it sends `head` as the head's state root once it knows that
        # root, and this double answers the big state at `head` only (a 404 then ended the
        # read at once, and no send timeout ran)
        mux = Beaconmux(config_text="server: {sendTimeout: 1s}\ncache: {enabled: false}\n"
                                    "upstreams:\n  - url: %s\n" % node.url)
        try:
            mux.wait_state("node1", "ready")
            s = socket.create_connection(("127.0.0.1", mux.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /eth/v2/debug/beacon/states/head HTTP/1.1\r\nHost: x\r\n\r\n")
            in_flight = lambda: mux.status()["read_path"]["in_flight"]
            wait_for(lambda: in_flight() == 1, 10, what="the read to start")
            # never read: the read path pauses the transfer, then the send timeout cuts the
            # client and the transfer is released
            wait_for(lambda: in_flight() == 0, 15, what="the transfer to be released")
            # the log line is read from beaconmux's stderr by a thread of this process, which
            # may run after the status answer above: waited for, not sampled
            wait_for(lambda: any("server.sendTimeout" in l for l in mux.stderr()), 5,
                     what="the send timeout's log line")
            s.close()
        finally:
            mux.stop()
            node.stop()


class HeavyDeadline(unittest.TestCase):
    """A full state takes longer than failsafe.timeout to stream: it has failsafe.heavyTimeout
    (default 5 minutes) and is not cut at the ordinary reads' deadline (checkpoint sync)."""

    def test_full_state_outlives_the_ordinary_deadline(self):
        node = FakeBeacon()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
        # 10 bytes at once, then one every 50 ms: the body is complete after about 1.5 s
        node.routes[("GET", "/eth/v2/debug/beacon/states/head")] = drip_route(head, b"x" * 10, 3.0)
        node.routes[("GET", "/eth/v1/beacon/states/head/fork")] = drip_route(head, b"x" * 10, 3.0)
        mux = Beaconmux(config_text="failsafe: {timeout: 500ms, hedge: {maxCount: 0}}\n"
                        "cache: {enabled: false}\nupstreams:\n  - url: %s\n" % node.url)
        try:
            mux.wait_state("node1", "ready")
            st, _, body = mux.request("GET", "/eth/v2/debug/beacon/states/head", timeout=15)
            self.assertEqual((st, len(body)), (200, 40))
            # an ordinary read of the same pace ends at failsafe.timeout (held, so a 504)
            st, _, body = mux.request("GET", "/eth/v1/beacon/states/head/fork", timeout=15)
            self.assertEqual(st, 504, body)
        finally:
            mux.stop()
            node.stop()


BROKEN = {
    # 101 nobody asked for, then bytes that are no HTTP answer
    "switch": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
              b"GARBAGE AFTER THE SWITCH",
    # an unassigned 1xx before a final answer
    "interim199": b"HTTP/1.1 199 Whatever\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    # a Content-Length that cannot be, a two-byte body, the close
    "overflow": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 99999999999999999999\r\n\r\n{}",
    "letters": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12x\r\n\r\n{}",
    # a body shorter than announced, a chunked body cut short
    "short": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}",
    "chunkcut": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                b"\r\n2\r\n{}\r\n",
}


class BrokenNodes:
    """A node answering BROKEN[name] at /eth/v1/beacon/states/head/{name} (tier 0) and, unless
    alone, a good node (tier 1) behind it. Run once with http:// nodes (the native client)
    and once with https:// nodes (libcurl)."""

    tls = False

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bm-hard-")
        cls.cert = cls.key = None
        if cls.tls:
            cls.cert, cls.key = self_signed_cert(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, alone=False):
        tls = (self.cert, self.key) if self.tls else None
        self.bad = FakeBeacon(tls=tls)
        for name, raw in BROKEN.items():
            self.bad.routes[("GET", "/eth/v1/beacon/states/head/" + name)] = raw_route(raw)
        self.bad.routes[("GET", "/eth/v1/beacon/states/head/big")] = raw_route(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2097152\r\n\r\n" +
            b"x" * 1500000)
        self.bad.routes[("GET", "/eth/v1/beacon/states/head/dripstream")] = drip_route(
            DRIP_BIG, b"x" * 1200000)
        self.bad.routes[("GET", "/eth/v1/beacon/states/head/dripheld")] = drip_route(
            DRIP_SMALL, b"x" * 10)
        self.nodes = [self.bad]
        cfg = (DRIP_RULES + "failsafe:\n  circuitBreaker: {failureThreshold: 0}\n  hedge: {maxCount: 0}\n"
               "upstreams:\n  - id: bad\n    url: %s\n    priority: 0\n" % self.bad.url)
        if not alone:
            self.good = FakeBeacon(tls=tls)
            self.good.routes[("*", "/eth/v1/node/identity")] = (
                200, {"Content-Type": "application/json"}, b'{"data":{"peer_id":"good"}}')
            for name in list(BROKEN) + ["big"]:
                self.good.routes[("GET", "/eth/v1/beacon/states/head/" + name)] = good_route
            self.nodes.append(self.good)
            cfg += "  - id: good\n    url: %s\n    priority: 1\n" % self.good.url
        self.bad.routes[("*", "/eth/v1/node/identity")] = (
            200, {"Content-Type": "application/json"}, b'{"data":{"peer_id":"bad"}}')
        if self.tls:
            cfg = "tls:\n  caFile: %s\n" % self.cert + cfg
        self.mux = Beaconmux(config_text=cfg)
        for n in ("bad",) + (() if alone else ("good",)):
            try:
                self.mux.wait_state(n, "ready")
            except AssertionError:
                ups = self.mux.upstreams()
                raise AssertionError("%s not ready: %s" % (n, {
                    k: u for k, u in ups.items() if k == n}))

    def tearDown(self):
        self.mux.stop()
        for n in self.nodes:
            n.stop()

    def test_broken_answer_is_that_nodes_failure(self):
        self.start()
        for name in BROKEN:
            with self.subTest(broken=name):
                # the first candidate, as the test needs: a loaded machine's Python fake can
                # leave a head probe unanswered for a quarter slot, and the node is then not
                # ready until it answers again
                self.mux.wait_state("bad", "ready")
                st, _, body = self.mux.request("GET", "/eth/v1/beacon/states/head/" + name)
                self.assertEqual((st, body), (200, GOOD))  # the next node was asked
                self.assertTrue(self.bad.find("GET", "/eth/v1/beacon/states/head/" + name))

    def test_pipelined_answers_stay_in_order(self):
        # Each broken answer is followed by a good one from the same node: two broken answers
        # in a row would (rightly) make it unreachable, and which node served the identity
        # would then depend on whether a head probe of it succeeded in between.
        self.start()
        # not from the cache: each identity is an exchange with the node after its broken one
        identity = b"GET /eth/v1/node/identity HTTP/1.1\r\nHost: x\r\nCache-Control: no-cache\r\n\r\n"
        raw = raw_exchange(self.mux.port, b"GET /eth/v1/beacon/states/head/switch HTTP/1.1\r\nHost: x\r\n\r\n"
                           + identity +
                           b"GET /eth/v1/beacon/states/head/overflow HTTP/1.1\r\nHost: x\r\n\r\n"
                           + identity.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"),
                           timeout=10)
        self.assertEqual(count_responses(raw), 4, raw)
        parts = raw.split(b"HTTP/1.1 ")[1:]
        for i in (0, 2):
            self.assertTrue(parts[i].startswith(b"200 ") and parts[i].endswith(GOOD), parts[i])
        for i in (1, 3):
            self.assertTrue(parts[i].startswith(b"200 ") and parts[i].endswith(b'{"data":{"peer_id":"bad"}}'),
                            "%s\n%s" % (parts[i], self.mux.explain(80)))

    def test_alone_a_broken_answer_is_a_502(self):
        self.start(alone=True)
        for name, why in (("switch", "101"), ("interim199", "interim"), ("overflow", "Content-Length"),
                          ("letters", "Content-Length")):
            with self.subTest(broken=name):
                st, _, body = self.mux.request("GET", "/eth/v1/beacon/states/head/" + name)
                self.assertEqual(st, 502, body)
                msg = json.loads(body)
                self.assertEqual(msg["code"], 502)
                self.assertIn("bad: invalid answer", msg["message"])
                self.assertIn(why.lower(), msg["message"].lower())

    def test_cut_after_the_first_byte_is_a_cut_connection(self):
        self.start()
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.mux.port, timeout=10)
        try:
            c.request("GET", "/eth/v1/beacon/states/head/big")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Length"), "2097152")
            with self.assertRaises(http.client.IncompleteRead):
                r.read()
        finally:
            c.close()


    def test_dripping_answer_is_cut_at_the_deadline(self):
        # the read's total deadline (a route rule's 1 s here) bounds the body too: a node
        # dripping a byte every 50 ms once the answer streams to the client gets the
        # client's connection cut (a truncated answer); one still held gets a clean 504
        self.start(alone=True)
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.mux.port, timeout=15)
        try:
            t0 = time.monotonic()
            c.request("GET", "/eth/v1/beacon/states/head/dripstream")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Length"), "2100000")
            with self.assertRaises(http.client.IncompleteRead):
                r.read()
            self.assertLess(time.monotonic() - t0, 8.0)  # the drip would go on for 20 s
        finally:
            c.close()
        self.mux.wait_line(r"dripstream via bad: the answer was not complete within the 1000 ms "
                           r"deadline; the client's connection is cut")
        t0 = time.monotonic()
        st, _, body = self.mux.request("GET", "/eth/v1/beacon/states/head/dripheld", timeout=15)
        self.assertEqual(st, 504, body)
        self.assertIn("bad: its answer was not complete", json.loads(body)["message"])
        self.assertLess(time.monotonic() - t0, 8.0)


class BrokenHttpNodes(BrokenNodes, unittest.TestCase):
    tls = False


@unittest.skipUnless(shutil.which("openssl"), "openssl CLI needed to make a test certificate")
class BrokenHttpsNodes(BrokenNodes, unittest.TestCase):
    tls = True


if __name__ == "__main__":
    main()
