# SPDX-License-Identifier: MIT
"""The HTTP edge of the beaconmux binary: limits, strictness, slowloris, pipelining,
Expect: 100-continue, keep-alive and graceful shutdown, with raw sockets."""
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Beaconmux, FakeBeacon, count_responses, main, raw_exchange, wait_for  # noqa: E402

CONFIG = """
server:
  headerTimeout: 500ms
  maxBodyBytes: 1MiB
  shutdownTimeout: 5s
timeouts:
  read: 3s
"""


class Edges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = FakeBeacon()
        cls.up.routes[("GET", "/eth/v1/node/peer_count")] = (
            200, {"Content-Type": "application/json"}, b'{"data":{"connected":"3"}}')
        cls.up.routes[("POST", "/eth/v1/beacon/pool/voluntary_exits")] = (
            200, {"Content-Type": "application/json"}, b"")
        cls.m = Beaconmux(config_text=CONFIG + "upstreams:\n  - url: %s\n" % cls.up.url)
        cls.m.wait_state("node1", "ready")

    @classmethod
    def tearDownClass(cls):
        cls.m.stop()
        cls.up.stop()

    def status_of(self, raw):
        line = raw.split(b"\r\n", 1)[0]
        return int(line.split()[1]) if line.startswith(b"HTTP/1.") else None

    def error_body(self, raw):
        return json.loads(raw.partition(b"\r\n\r\n")[2])

    def test_414_target_too_long(self):
        target = b"/eth/v1/beacon/states/head/validators?id=" + b"1," * 40000
        raw = raw_exchange(self.m.port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(self.status_of(raw), 414)
        self.assertEqual(self.error_body(raw)["code"], 414)

    def test_long_target_under_limit_is_fine(self):
        target = b"/eth/v1/node/peer_count?id=" + b"9" * 60000
        raw = raw_exchange(self.m.port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(self.status_of(raw), 200)

    def test_431_headers_too_large(self):
        raw = raw_exchange(self.m.port, b"GET /eth/v1/node/peer_count HTTP/1.1\r\nHost: x\r\nX-Big: "
                           + b"a" * 17000 + b"\r\n\r\n")
        self.assertEqual(self.status_of(raw), 431)
        self.assertEqual(self.error_body(raw)["code"], 431)

    def test_413_body_too_large(self):
        raw = raw_exchange(self.m.port, b"POST /eth/v1/beacon/pool/voluntary_exits HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n")
        self.assertEqual(self.status_of(raw), 413)
        self.assertEqual(self.error_body(raw)["code"], 413)

    def test_400_for_rfc9112_violations(self):
        for bad in (b"GET /eth/v1/node/peer_count HTTP/1.1\r\nHost : x\r\n\r\n",
                    b"GET /eth/v1/node/peer_count HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
                    b"GET /eth/v1/node/peer_count HTTP/1.1\nHost: x\n\n"):
            raw = raw_exchange(self.m.port, bad)
            self.assertEqual(self.status_of(raw), 400, bad)
            self.assertEqual(self.error_body(raw)["code"], 400)

    def test_slowloris_is_cut(self):
        s = socket.create_connection(("127.0.0.1", self.m.port), timeout=5)
        t0 = time.monotonic()
        closed_after = None
        try:
            s.sendall(b"GET /eth/v1/node/peer_count HTTP/1.1\r\n")
            for i in range(40):  # one header line every 100 ms, never finishing
                try:
                    s.sendall(b"X-%d: y\r\n" % i)
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
                s.settimeout(0.1)
                try:
                    data = s.recv(4096)
                    if data == b"" or data.startswith(b"HTTP/1.1 408"):
                        closed_after = time.monotonic() - t0
                        break
                except socket.timeout:
                    pass
        finally:
            s.close()
        self.assertIsNotNone(closed_after, "a trickling client kept its connection")
        self.assertLess(closed_after, 2.0)

    def test_pipelining(self):
        req = b"GET /eth/v1/node/peer_count HTTP/1.1\r\nHost: x\r\n\r\n"
        raw = raw_exchange(self.m.port, req * 3, timeout=5, expect_bytes=None)
        self.assertEqual(count_responses(raw), 3)
        self.assertEqual(raw.count(b'{"data":{"connected":"3"}}'), 3)

    def test_expect_100_continue(self):
        body = b'[{"message":{"epoch":"1","validator_index":"1"},"signature":"0x00"}]'
        s = socket.create_connection(("127.0.0.1", self.m.port), timeout=5)
        try:
            s.sendall(b"POST /eth/v1/beacon/pool/voluntary_exits HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            first = s.recv(4096)
            self.assertTrue(first.startswith(b"HTTP/1.1 100"), first)
            s.sendall(body)
            rest = b""
            while b"\r\n\r\n" not in rest:
                rest += s.recv(4096)
            self.assertTrue(rest.startswith(b"HTTP/1.1 200"), rest)
        finally:
            s.close()
        self.assertEqual(self.up.find("POST", "/eth/v1/beacon/pool/voluntary_exits")[-1]["body"], body)

    def test_chunked_request_body(self):
        raw = raw_exchange(self.m.port, b"POST /eth/v1/beacon/pool/voluntary_exits HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                           b"Connection: close\r\n\r\n5\r\n[{\"a\"\r\n4\r\n:1}]\r\n0\r\n\r\n")
        self.assertEqual(self.status_of(raw), 200)
        self.assertEqual(self.up.find("POST", "/eth/v1/beacon/pool/voluntary_exits")[-1]["body"],
                         b'[{"a":1}]')


class Shutdown(unittest.TestCase):
    def test_graceful_shutdown_finishes_in_flight(self):
        up = FakeBeacon()
        release = threading.Event()

        def slow(handler, rec):
            release.wait(5)
            return 200, {"Content-Type": "application/json"}, b'{"data":"slow"}'
        up.routes[("GET", "/eth/v1/node/peers")] = slow
        m = Beaconmux(config_text=CONFIG + "upstreams:\n  - url: %s\n" % up.url)
        try:
            m.wait_state("node1", "ready")
            result = {}

            def client():
                result["r"] = m.request("GET", "/eth/v1/node/peers", timeout=10)
            t = threading.Thread(target=client)
            t.start()
            wait_for(lambda: up.find("GET", "/eth/v1/node/peers"), what="the request to reach the node")
            m.signal(signal.SIGTERM)
            m.wait_line(r"shutting down")
            # new connections are refused while the in-flight request finishes
            def refused():
                try:
                    socket.create_connection(("127.0.0.1", m.port), timeout=1).close()
                    return False
                except OSError:
                    return True
            wait_for(refused, timeout=5, what="the listener to close")
            release.set()
            t.join(10)
            self.assertEqual(result["r"][0], 200)
            self.assertEqual(result["r"][2], b'{"data":"slow"}')
            m.p.wait(10)
            self.assertEqual(m.p.returncode, 0)
        finally:
            release.set()
            m.stop()
            up.stop()


if __name__ == "__main__":
    main()
