# SPDX-License-Identifier: MIT
"""HTTPS upstreams: certificate verification with a configured CA file, credentials in the
URL sent as Basic auth and never logged, and a node with an untrusted certificate refused."""
import gzip
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Beaconmux, FakeBeacon, main, self_signed_cert, wait_for  # noqa: E402


@unittest.skipUnless(shutil.which("openssl"), "openssl CLI needed to make a test certificate")
class Tls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bm-tls-")
        cls.cert, cls.key = self_signed_cert(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_https_upstream_with_ca_file_and_credentials(self):
        up = FakeBeacon(tls=(self.cert, self.key))
        up.routes[("GET", "/eth/v1/node/identity")] = (
            200, {"Content-Type": "application/json"}, b'{"data":{"peer_id":"x"}}')
        secret = "tls-s3cret"
        cfg = ("tls:\n  caFile: %s\nupstreams:\n  - id: secure\n    url: https://op:%s@127.0.0.1:%d\n"
               "    headers:\n      X-Api-Key: k123\n" % (self.cert, secret, up.port))
        m = Beaconmux(config_text=cfg)
        try:
            m.wait_state("secure", "ready")
            st, _, body = m.request("GET", "/eth/v1/node/identity")
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(body)["data"]["peer_id"], "x")
            rec = up.find("GET", "/eth/v1/node/identity")[-1]
            self.assertTrue(rec["headers"].get("Authorization", "").startswith("Basic "))
            self.assertEqual(rec["headers"].get("X-Api-Key"), "k123")
            self.assertNotIn(secret, json.dumps(m.status()))
        finally:
            m.stop()
            up.stop()
        self.assertNotIn(secret, "\n".join(m.stderr()))

    def test_hosted_node_sends_reads_gzip(self):
        # a hosted (https) node is asked for gzip on reads, which beaconmux inflates: the
        # client gets identity bytes with their exact length; writes stay identity
        up = FakeBeacon(tls=(self.cert, self.key))
        body = json.dumps({"data": [{"index": str(i), "balance": "32000000000"}
                                    for i in range(500)]}).encode()
        up.routes[("GET", "/eth/v1/beacon/states/head/validator_balances")] = (
            200, {"Content-Type": "application/json", "Content-Encoding": "gzip"},
            gzip.compress(body))
        cfg = ("tls:\n  caFile: %s\ncache:\n  enabled: false\nupstreams:\n"
               "  - url: https://127.0.0.1:%d\n" % (self.cert, up.port))
        m = Beaconmux(config_text=cfg)
        try:
            wait_for(lambda: m.node_states().get("node1") not in (None, "unknown"), 10)
            st, hdrs, got = m.request("GET", "/eth/v1/beacon/states/head/validator_balances",
                                      headers={"Accept-Encoding": "identity"})
            self.assertEqual(st, 200)
            self.assertEqual(got, body)
            self.assertNotIn("content-encoding", hdrs)
            self.assertEqual(int(hdrs["content-length"]), len(body))
            rec = up.find("GET", "/eth/v1/beacon/states/head/validator_balances")[-1]
            self.assertIn("gzip", rec["headers"].get("Accept-Encoding", ""))
            m.request("POST", "/eth/v1/beacon/pool/attestations", body=b"[]",
                      headers={"Content-Type": "application/json"})
            rec = up.find("POST", "/eth/v1/beacon/pool/attestations")[-1]
            self.assertEqual(rec["headers"].get("Accept-Encoding"), "identity")
        finally:
            m.stop()
            up.stop()

    def test_untrusted_certificate_is_refused(self):
        up = FakeBeacon(tls=(self.cert, self.key))
        m = Beaconmux(upstreams=[up.url])
        try:
            m.wait_state("node1", "unreachable")
            reason = m.status()["upstreams"][0]["reason"]
            self.assertTrue("SSL" in reason or "certificate" in reason.lower() or "TLS" in reason, reason)
            self.assertEqual(len(up.find("GET", "/eth/v1/node/version")), 0)
        finally:
            m.stop()
            up.stop()


if __name__ == "__main__":
    main()
