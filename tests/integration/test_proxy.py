# SPDX-License-Identifier: MIT
"""Integration tests of the proxy core against upstreams NOT built on our HTTP
module (python's http.server, raw sockets), so a bug shared by our server and our
simulator cannot hide on both sides."""
import gzip
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (ROOT_A, ROOT_B, Beaconmux, FakeBeacon, HangServer, closed_port,  # noqa: E402
                     count_responses, http_request, main, raw_exchange, wait_for)

# The response cache is off: these tests watch each read pass through to the nodes (the fake
# nodes know only the ids they were given, not the roots the cache rewrites `head` to);
# test_edge covers the cache.
FAST = """
cache:
  enabled: false
timeouts:
  connect: 300ms
  read: 500ms
  write: 2s
discovery:
  retryInterval: 200ms
server:
  headerTimeout: 400ms
"""


def yaml_upstreams(*urls, tiers=False):
    """The upstream list; with `tiers`, node i gets priority i, so that the read path asks
    them in configuration order (otherwise it balances among them)."""
    lines = ["upstreams:"]
    for i, u in enumerate(urls):
        lines += ["  - id: n%d" % (i + 1), "    url: %s" % u]
        if tiers:
            lines += ["    priority: %d" % i]
    return "\n".join(lines) + "\n"


class ProxyBase(unittest.TestCase):
    def setUp(self):
        self.fakes = []
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.stop()
        for f in self.fakes:
            f.stop()

    def fake(self, **kw):
        f = FakeBeacon(**kw)
        self.fakes.append(f)
        return f

    TIERS = False  # node i at priority i: asked in configuration order

    def mux(self, *urls, extra=""):
        m = Beaconmux(config_text=FAST + extra + yaml_upstreams(*urls, tiers=self.TIERS))
        self.procs.append(m)
        return m

    def ready(self, m, *ids):
        for i in ids:
            m.wait_state(i, "ready")


class PassThrough(ProxyBase):
    def test_get_and_post_json_with_headers_both_ways(self):
        up = self.fake()
        up.routes[("GET", "/eth/v1/beacon/headers/head")] = (
            200, {"Content-Type": "application/json", "Eth-Consensus-Version": "fulu",
                  "X-Custom": "kept"}, b'{"data":{"root":"0x01"}}')
        # a field the node's Connection names is for that hop only
        up.routes[("GET", "/eth/v1/beacon/states/head/fork")] = (
            200, {"Content-Type": "application/json", "Connection": "keep-alive, X-Hop",
                  "X-Hop": "node only", "X-Custom": "kept"}, b'{"data":{}}')
        up.routes[("POST", "/eth/v1/beacon/pool/attestations")] = (
            200, {"Content-Type": "application/json"}, b"")
        m = self.mux(up.url)
        st, h, body = m.request("GET", "/eth/v1/beacon/headers/head?x=1",
                                headers={"X-Client": "abc", "Accept-Encoding": "gzip",
                                         "Connection": "keep-alive", "TE": "trailers"})
        self.assertEqual(st, 200)
        self.assertEqual(body, b'{"data":{"root":"0x01"}}')
        self.assertEqual(h.get("eth-consensus-version"), "fulu")
        self.assertEqual(h.get("x-custom"), "kept")
        st, h, _ = m.request("GET", "/eth/v1/beacon/states/head/fork")
        self.assertEqual(st, 200)
        self.assertEqual(h.get("x-custom"), "kept")
        self.assertNotIn("x-hop", {k.lower() for k in h})
        rec = up.find("GET", "/eth/v1/beacon/headers/head?x=1")[-1]
        hdrs = {k.lower(): v for k, v in rec["headers"].items()}
        self.assertEqual(hdrs.get("x-client"), "abc")
        # the client's gzip never reaches the node; identity is asked instead
        self.assertEqual(hdrs.get("accept-encoding"), "identity")
        self.assertNotIn("te", hdrs)
        self.assertEqual(hdrs.get("host"), "127.0.0.1:%d" % up.port)
        payload = b'[{"aggregation_bits":"0x01","data":{}}]'
        st, _, _ = m.request("POST", "/eth/v1/beacon/pool/attestations", body=payload,
                             headers={"Content-Type": "application/json",
                                      "Eth-Consensus-Version": "electra"})
        self.assertEqual(st, 200)
        rec = up.find("POST", "/eth/v1/beacon/pool/attestations")[-1]
        self.assertEqual(rec["body"], payload)
        hdrs = {k.lower(): v for k, v in rec["headers"].items()}
        self.assertEqual(hdrs.get("content-type"), "application/json")
        self.assertEqual(hdrs.get("eth-consensus-version"), "electra")

    def test_ssz_both_ways(self):
        up = self.fake()
        ssz = bytes(range(256)) * 4 + b"\x00\x00\xff"
        up.routes[("GET", "/eth/v2/beacon/blocks/head")] = (
            200, {"Content-Type": "application/octet-stream", "Eth-Consensus-Version": "fulu",
                  "Eth-Execution-Payload-Blinded": "false",
                  "Eth-Execution-Payload-Value": "18446744073709551617",
                  "Eth-Consensus-Block-Value": "9223372036854775809"}, ssz)

        def echo(handler, rec):
            return 200, {"Content-Type": "application/octet-stream"}, rec["body"][::-1]
        up.routes[("POST", "/eth/v2/beacon/blocks")] = echo
        m = self.mux(up.url)
        st, h, body = m.request("GET", "/eth/v2/beacon/blocks/head",
                                headers={"Accept": "application/octet-stream;q=1.0,application/json;q=0.9"})
        self.assertEqual(st, 200)
        self.assertEqual(body, ssz)
        self.assertEqual(h["content-type"], "application/octet-stream")
        self.assertEqual(h["eth-execution-payload-value"], "18446744073709551617")
        self.assertEqual(h["eth-consensus-block-value"], "9223372036854775809")
        self.assertEqual(h["eth-execution-payload-blinded"], "false")
        rec = up.find("GET", "/eth/v2/beacon/blocks/head")[-1]
        self.assertTrue(rec["headers"].get("Accept", "").startswith("application/octet-stream"))
        st, _, body = m.request("POST", "/eth/v2/beacon/blocks?broadcast_validation=gossip", body=ssz,
                                headers={"Content-Type": "application/octet-stream",
                                         "Eth-Consensus-Version": "fulu"})
        self.assertEqual(st, 200)
        self.assertEqual(body, ssz[::-1])
        rec = up.find("POST", "/eth/v2/beacon/blocks?broadcast_validation=gossip")[-1]
        self.assertEqual(rec["body"], ssz)
        self.assertEqual(rec["headers"].get("Content-Type"), "application/octet-stream")

    def test_large_post_has_no_expect_stall(self):
        up = self.fake()
        up.routes[("POST", "/eth/v2/beacon/blocks")] = (200, {"Content-Type": "application/json"}, b"")
        m = self.mux(up.url)
        body = os.urandom(2 * 1024 * 1024)
        t0 = time.monotonic()
        st, _, _ = m.request("POST", "/eth/v2/beacon/blocks", body=body,
                             headers={"Content-Type": "application/octet-stream"})
        elapsed = time.monotonic() - t0
        self.assertEqual(st, 200)
        rec = up.find("POST", "/eth/v2/beacon/blocks")[-1]
        self.assertEqual(rec["body"], body)
        self.assertNotIn("100-continue", str(rec["headers"].get("Expect", "")).lower())
        # libcurl would wait up to 1 s for "100 Continue" before sending a body over 1 MiB
        self.assertLess(elapsed, 0.8, "2 MiB POST took %.3f s" % elapsed)

    def test_credentials_never_in_logs_or_status(self):
        up = self.fake()
        up.routes[("GET", "/eth/v1/node/peer_count")] = (
            200, {"Content-Type": "application/json"}, b'{"data":{"connected":"5"}}')
        secret = "s3cr3t-pa55word"
        url = "http://alice:%s@127.0.0.1:%d" % (secret, up.port)
        m = self.mux(url, "http://bob:%s@127.0.0.1:%d" % (secret, closed_port()))
        self.ready(m, "n1")
        m.wait_state("n2", "unreachable")
        st, _, body = m.request("GET", "/eth/v1/node/peer_count")
        self.assertEqual(st, 200, "%s\n%s" % (body, m.explain(80)))
        rec = up.find("GET", "/eth/v1/node/peer_count")[-1]
        self.assertTrue(rec["headers"].get("Authorization", "").startswith("Basic "))
        status = json.dumps(m.status())
        self.assertNotIn(secret, status)
        self.assertIn("alice", status)
        m.stop()
        logs = "\n".join(m.stderr())
        self.assertNotIn(secret, logs)
        self.assertIn("127.0.0.1", logs)


class Failover(ProxyBase):
    """One node after another, in tier order (each node its own priority tier)."""
    ROUTE = "/eth/v1/beacon/states/head/finality_checkpoints"
    TIERS = True

    def good(self):
        up = self.fake()
        up.routes[("GET", self.ROUTE)] = (200, {"Content-Type": "application/json"},
                                          b'{"data":{"finalized":{"epoch":"1"}}}')
        return up

    def two_ready(self):
        first, good = self.good(), self.good()
        m = self.mux(first.url, good.url)
        self.ready(m, "n1", "n2")
        return first, good, m

    def test_first_down(self):
        first, good, m = self.two_ready()
        first.stop()  # ready a moment ago, refusing connections now
        t0 = time.monotonic()
        st, _, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 200)
        self.assertEqual(len(good.find("GET", self.ROUTE)), 1)
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_first_hung(self):
        first, good, m = self.two_ready()
        first.mode = "hang"  # accepts and never answers
        t0 = time.monotonic()
        st, _, body = m.request("GET", self.ROUTE)
        elapsed = time.monotonic() - t0
        self.assertEqual(st, 200)
        self.assertEqual(len(first.find("GET", self.ROUTE)), 1)
        self.assertEqual(len(good.find("GET", self.ROUTE)), 1)
        # bounded by the read timeout (500 ms here), not by the client
        self.assertGreaterEqual(elapsed, 0.4)
        self.assertLess(elapsed, 2.0)

    def test_first_returns_500(self):
        bad = self.fake()
        bad.mode = "error"
        good = self.good()
        m = self.mux(bad.url, good.url)
        self.ready(m, "n1", "n2")
        st, _, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 200)
        self.assertEqual(len(bad.find("GET", self.ROUTE)), 1)

    def test_first_closes_mid_body(self):
        bad = self.good()
        bad.mode = "midbody"
        good = self.good()
        m = self.mux(bad.url, good.url)
        self.ready(m, "n1", "n2")
        st, _, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(body)["data"]["finalized"]["epoch"], "1")
        self.assertEqual(len(bad.find("GET", self.ROUTE)), 1)
        self.assertEqual(len(good.find("GET", self.ROUTE)), 1)

    def test_all_fail_answers_last_5xx_or_503(self):
        a, b = self.fake(), self.fake()
        a.mode = b.mode = "error"
        m = self.mux(a.url, b.url)
        self.ready(m, "n1", "n2")
        st, h, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 500)
        self.assertEqual(json.loads(body), {"code": 500, "message": "internal error"})
        m2 = self.mux("http://127.0.0.1:%d" % closed_port(), "http://127.0.0.1:%d" % closed_port())
        st, h, body = m2.request("GET", self.ROUTE)
        self.assertEqual(st, 503)
        err = json.loads(body)
        self.assertEqual(err["code"], 503)
        self.assertIn("n1", err["message"])
        self.assertIn("n2", err["message"])

    def test_kept_answer_relayed_with_its_fields(self):
        # n1's 500 is kept while n2 is tried; n2 refuses, so n1's answer is relayed after its
        # own transfer ended: with its fields, not only its body
        a = self.fake()
        a.routes[("GET", self.ROUTE)] = (500, {"Content-Type": "application/json",
                                               "X-Node": "n1-kept"},
                                         b'{"code":500,"message":"kept"}')
        m = self.mux(a.url, "http://127.0.0.1:%d" % closed_port())
        self.ready(m, "n1")
        st, h, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 500)
        self.assertEqual(h.get("x-node"), "n1-kept")
        self.assertEqual(json.loads(body), {"code": 500, "message": "kept"})

    def test_4xx_is_final(self):
        a, b = self.fake(), self.good()
        a.routes[("GET", self.ROUTE)] = (404, {"Content-Type": "application/json"},
                                         b'{"code":404,"message":"State not found"}')
        m = self.mux(a.url, b.url)
        self.ready(m, "n1", "n2")
        st, _, body = m.request("GET", self.ROUTE)
        self.assertEqual(st, 404)
        self.assertEqual(len(b.find("GET", self.ROUTE)), 0)

    def test_failure_after_first_byte_aborts_client(self):
        big = b"x" * (3 * 1024 * 1024)  # over the 1 MiB hold limit: streamed
        bad, good = self.fake(), self.fake()
        bad.routes[("GET", "/eth/v2/debug/beacon/states/head")] = (
            200, {"Content-Type": "application/octet-stream"}, big)
        bad.mode = "midbody"
        good.routes[("GET", "/eth/v2/debug/beacon/states/head")] = (
            200, {"Content-Type": "application/octet-stream"}, b"y" * len(big))
        m = self.mux(bad.url, good.url)
        self.ready(m, "n1", "n2")
        raw = raw_exchange(m.port, b"GET /eth/v2/debug/beacon/states/head HTTP/1.1\r\nHost: x\r\n\r\n",
                           timeout=10)
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertIn(b"200", head.split(b"\r\n")[0])
        # the client sees a truncated answer and a closed connection, never y's after x's
        self.assertNotIn(b"y", body)
        self.assertLess(len(body), len(big))

    def test_node_order_prefers_ready(self):
        down_then_up = self.fake()
        good = self.good()
        down_then_up.stop()
        m = self.mux(down_then_up.url, good.url)
        m.wait_state("n1", "unreachable")
        m.wait_state("n2", "ready")
        down_then_up.restart()
        down_then_up.routes[("GET", self.ROUTE)] = good.routes[("GET", self.ROUTE)]
        m.wait_state("n1", "ready", timeout=10)
        st, _, _ = m.request("GET", self.ROUTE)
        self.assertEqual(st, 200)
        self.assertEqual(len(down_then_up.find("GET", self.ROUTE)), 1)


class ClientPaths(ProxyBase):
    def test_client_specific_paths(self):
        lh = self.fake(version="Lighthouse/v7.0.0/x86_64-linux")
        teku = self.fake(version="teku/v25.1.0/linux-x86_64")
        for f in (lh, teku):
            f.routes[("GET", "/lighthouse/peers")] = (200, {"Content-Type": "application/json"}, b"{}")
            f.routes[("GET", "/teku/v1/admin/readiness")] = (200, {"Content-Type": "application/json"}, b"{}")
        m = self.mux(teku.url, lh.url)
        self.ready(m, "n1", "n2")
        wait_for(lambda: {u["id"]: u["client"] for u in m.status()["upstreams"]} ==
                 {"n1": "teku", "n2": "lighthouse"}, what="clients detected")
        st, _, _ = m.request("GET", "/lighthouse/peers")
        self.assertEqual(st, 200)
        self.assertEqual(len(lh.find("GET", "/lighthouse/peers")), 1)
        self.assertEqual(len(teku.find("GET", "/lighthouse/peers")), 0)
        st, _, _ = m.request("GET", "/teku/v1/admin/readiness")
        self.assertEqual(st, 200)
        self.assertEqual(len(teku.find("GET", "/teku/v1/admin/readiness")), 1)
        st, _, body = m.request("GET", "/nimbus/v1/chain/head")
        self.assertEqual(st, 503)
        self.assertIn("nimbus", json.loads(body)["message"])


class Discovery(ProxyBase):
    def test_static_503_until_first_success_never_404(self):
        port = closed_port()
        m = self.mux("http://127.0.0.1:%d" % port)
        for path in ("/eth/v1/beacon/genesis", "/eth/v1/config/spec",
                     "/eth/v1/config/fork_schedule", "/eth/v1/config/deposit_contract"):
            st, _, body = m.request("GET", path)
            self.assertEqual(st, 503, path)
            self.assertEqual(json.loads(body)["code"], 503)
        st, _, _ = m.request("GET", "/healthz")
        self.assertEqual(st, 503)

    def test_static_bodies_verbatim_from_one_node(self):
        a = self.fake(version="Lighthouse/v7.0.0/x86_64-linux")
        b = self.fake(version="teku/v25.1.0/linux")
        a.spec["ONLY_IN_A"] = "1"
        b.spec["ONLY_IN_B"] = "2"
        m = self.mux(a.url, b.url)
        self.ready(m, "n1", "n2")
        st, h, body = m.request("GET", "/eth/v1/config/spec")
        self.assertEqual(st, 200)
        data = json.loads(body)["data"]
        # never a merge: one node's key set
        self.assertEqual(("ONLY_IN_A" in data) + ("ONLY_IN_B" in data), 1)
        st, _, body = m.request("GET", "/eth/v1/beacon/genesis")
        self.assertEqual(json.loads(body)["data"]["genesis_validators_root"], ROOT_A)
        st, _, _ = m.request("GET", "/healthz")
        self.assertEqual(st, 200)

    def test_wrong_network_by_majority_and_by_config(self):
        a, b, c = self.fake(), self.fake(), self.fake(genesis_root=ROOT_B)
        m = self.mux(a.url, b.url, c.url)
        self.ready(m, "n1", "n2")
        m.wait_state("n3", "wrong-network")
        reason = [u for u in m.status()["upstreams"] if u["id"] == "n3"][0]["reason"]
        self.assertIn("genesis_validators_root", reason)
        # a request never goes to the wrong-network node
        for f in (a, b, c):
            f.routes[("GET", "/eth/v1/beacon/states/head/fork")] = (200, {"Content-Type": "application/json"}, b"{}")
        a.mode = b.mode = "error"
        st, _, _ = m.request("GET", "/eth/v1/beacon/states/head/fork")
        self.assertEqual(st, 500)
        self.assertEqual(len(c.find("GET", "/eth/v1/beacon/states/head/fork")), 0)
        # a 1-1 split settled by configuration
        d, e = self.fake(), self.fake(genesis_root=ROOT_B)
        m2 = self.mux(d.url, e.url, extra="genesisValidatorsRoot: \"%s\"\n" % ROOT_B)
        m2.wait_state("n1", "wrong-network")
        m2.wait_state("n2", "ready")

    def test_critical_spec_key_disagreement(self):
        a, b, c = self.fake(), self.fake(), self.fake()
        c.spec["ELECTRA_FORK_EPOCH"] = "5"
        m = self.mux(a.url, b.url, c.url)
        self.ready(m, "n1", "n2")
        m.wait_state("n3", "wrong-network")
        reason = [u for u in m.status()["upstreams"] if u["id"] == "n3"][0]["reason"]
        self.assertIn("ELECTRA_FORK_EPOCH", reason)

    def test_spec_refetched_after_reconnect_with_new_version(self):
        a = self.fake(version="Lighthouse/v7.0.0/x86_64-linux")
        m = self.mux(a.url)
        self.ready(m, "n1")
        st, _, body = m.request("GET", "/eth/v1/config/spec")
        self.assertNotIn("GLOAS_NEW_KEY", json.loads(body)["data"])
        a.stop()
        m.wait_state("n1", "unreachable")
        a.spec["GLOAS_NEW_KEY"] = "42"
        a.version = "Lighthouse/v7.1.0/x86_64-linux"
        a.restart()
        m.wait_state("n1", "ready")

        def has_key():
            st, _, body = m.request("GET", "/eth/v1/config/spec")
            return st == 200 and "GLOAS_NEW_KEY" in json.loads(body)["data"]
        wait_for(has_key, what="the new spec key to be served")
        self.assertEqual(m.status()["upstreams"][0]["version"], "Lighthouse/v7.1.0/x86_64-linux")

    def test_spec_refetched_every_epoch(self):
        # 1 s slots, 2 slots per epoch: an epoch passes every 2 s
        a = self.fake(seconds_per_slot=1, slots_per_epoch=2, genesis_time=int(time.time()) - 100)
        m = self.mux(a.url)
        self.ready(m, "n1")
        a.spec["ADDED_LATER"] = "1"

        def has_key():
            st, _, body = m.request("GET", "/eth/v1/config/spec")
            return "ADDED_LATER" in json.loads(body)["data"]
        wait_for(has_key, timeout=8, what="the spec to be re-fetched at the next epoch")


if __name__ == "__main__":
    main()
