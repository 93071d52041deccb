# SPDX-License-Identifier: MIT
"""The edge end to end against beaconsim: the reorg-safe response cache (a head answer
replaced at the next head and after a re-org, a finalized block served with every node down,
no-cache, poisoned answers), read coalescing, gzip, CORS, API keys, rate limits, several
networks side by side, and secure-by-default listening (docs/cache.md, docs/edge.md)."""
import base64
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN_DIR, Beaconmux, Beaconsim, FakeBeacon, http_request, main, wait_for  # noqa: E402

BASE = """
timeouts:
  connect: 300ms
  read: 2s
discovery:
  retryInterval: 200ms
"""


def upstreams(sim, prefix="n", indent=""):
    out = indent + "upstreams:\n"
    for i, u in enumerate(sim.nodes):
        out += indent + "  - id: %s%d\n" % (prefix, i) + indent + "    url: %s\n" % u
    return out


def requests_to(sim, op):
    return sum(sim.requests(i)["data"].get(op, 0) for i in range(len(sim.nodes)))


def clear_requests(sim):
    for i in range(len(sim.nodes)):
        sim._json("DELETE", "/sim/v1/nodes/%d/requests" % i)


class Edge(unittest.TestCase):
    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()

    def start(self, nodes=3, config="", specs=None, args=(), slot_ms=1000, spe=8):
        sim = Beaconsim(nodes=nodes, slot_ms=slot_ms, slots_per_epoch=spe, node_specs=specs,
                        args=args)
        self.procs.append(sim)
        mux = Beaconmux(config_text=BASE + config + upstreams(sim))
        self.procs.append(mux)
        for i in range(nodes):
            mux.wait_state("n%d" % i, "ready")
        return sim, mux

    def get(self, mux, path, headers=None):
        st, hdrs, body = mux.request("GET", path, headers=headers)
        return st, {k.lower(): v for k, v in hdrs.items()}, body

    def cache_status(self, mux):
        return mux.status()["cache"]

    def head(self, mux):
        """The cluster head (slot as a number, root), or (-1, None) before the first."""
        h = mux.status()["cluster_head"]
        return (int(h["slot"]), h["root"]) if h else (-1, None)

    # ---- the cache -------------------------------------------------------------------

    def test_head_answer_replaced_at_next_head(self):
        sim, mux = self.start()
        # keys follow the cluster head: none before the first
        wait_for(lambda: self.head(mux)[0] >= 1, 10, what="a cluster head")
        st, h, first = self.get(mux, "/eth/v1/beacon/headers/head")
        self.assertEqual(st, 200)
        root = json.loads(first)["data"]["root"]
        clear_requests(sim)
        st, h2, again = self.get(mux, "/eth/v1/beacon/headers/head")
        if json.loads(again)["data"]["root"] == root:  # the head did not move in between
            self.assertEqual(h2.get("x-beaconmux-cache"), "hit")
            self.assertEqual(again, first)
            self.assertEqual(requests_to(sim, "getBlockHeader"), 0)
        # the next head: a new key, never the old answer
        slot = json.loads(first)["data"]["header"]["message"]["slot"]
        sim.wait_slot(int(slot) + 2)
        wait_for(lambda: self.head(mux)[0] > int(slot), 5, what="the cluster head moves")
        before = self.head(mux)[1]
        st, h3, later = self.get(mux, "/eth/v1/beacon/headers/head")
        after = self.head(mux)[1]
        self.assertEqual(st, 200)
        now = json.loads(later)["data"]
        self.assertNotEqual(now["root"], root)
        self.assertIn(now["root"], {before, after})  # the cluster head of that moment

    def test_reorg_never_serves_the_orphaned_block(self):
        sim, mux = self.start()
        cur = sim.truth()["current_slot"]
        s = cur + 3
        sim.scenario({"type": "late-block", "slot": s})
        sim.wait_slot(s)
        # while the late block is the head, ask for it by slot and by head (cached)
        wait_for(lambda: self.head(mux)[0] == s, 3, what="the late block becomes the head")
        st, _, body = self.get(mux, "/eth/v1/beacon/headers/%d" % s)
        orphan = json.loads(body)["data"]["root"] if st == 200 else None
        self.get(mux, "/eth/v1/beacon/headers/head")
        # slot s+1 builds on s's parent: the cluster re-orgs away from s
        sim.wait_slot(s + 2)
        wait_for(lambda: self.head(mux)[0] >= s + 1, 5, what="the head after the re-org")
        truth = sim.truth(s)
        self.assertTrue(truth.get("orphaned") or not truth.get("canonical", True), truth)
        st, h, body = self.get(mux, "/eth/v1/beacon/headers/%d" % s)
        if st == 200:  # a node still on the old branch may answer; never from the cache
            self.assertNotEqual(h.get("x-beaconmux-cache"), "hit")
        before = self.head(mux)[1]
        st, h, body = self.get(mux, "/eth/v1/beacon/headers/head")
        after = self.head(mux)[1]
        self.assertEqual(st, 200)
        self.assertNotEqual(json.loads(body)["data"]["root"], orphan)
        self.assertIn(json.loads(body)["data"]["root"], {before, after})

    def test_finalized_block_served_with_every_node_down(self):
        sim, mux = self.start(slot_ms=500, spe=4)
        # a head block, cached while it is not final (a chain entry, finalized: false)
        wait_for(lambda: self.head(mux)[0] >= 1, 10, what="a cluster head")
        st, h, early = self.get(mux, "/eth/v1/beacon/headers/head")
        self.assertEqual(st, 200)
        head = json.loads(early)["data"]
        self.assertFalse(json.loads(early)["finalized"])
        head_slot = int(head["header"]["message"]["slot"])
        # finality passes it: the entry is promoted (no TTL), its flag set when served
        wait_for(lambda: (self.cache_status(mux)["finalized_epoch"] or 0) * 4 >= head_slot, 20,
                 what="finality past slot %d" % head_slot)
        self.assertGreaterEqual(self.cache_status(mux)["promotions"], 1)
        # finality moves: epoch >= 1 known from the cluster stream
        wait_for(lambda: (self.cache_status(mux)["finalized_epoch"] or 0) >= 1, 15,
                 what="a finalized checkpoint")
        st, h, fin = self.get(mux, "/eth/v2/beacon/blocks/finalized")
        self.assertEqual(st, 200, fin)
        self.assertEqual(h.get("x-beaconmux-cache"), "miss")
        st, h, one = self.get(mux, "/eth/v1/beacon/headers/1")
        self.assertEqual(st, 200)
        for i in range(len(sim.nodes)):
            sim.put_node(i, {"down": True})
        for path, want in (("/eth/v1/beacon/headers/1", one),):
            st, h, body = self.get(mux, path)
            self.assertEqual(st, 200)
            self.assertEqual(h.get("x-beaconmux-cache"), "hit")
            self.assertEqual(body, want)
            self.assertTrue(json.loads(body)["finalized"])  # set at serve time
        # the finalized block by its root (the key `finalized` resolved to)
        st, h, body = self.get(mux, "/eth/v2/beacon/blocks/finalized")
        self.assertEqual(st, 200)
        self.assertEqual(body, fin)
        # the promoted head block, by its root: from the cache, now saying finalized
        st, h, body = self.get(mux, "/eth/v1/beacon/headers/" + head["root"])
        self.assertEqual(st, 200)
        self.assertEqual(h.get("x-beaconmux-cache"), "hit")
        self.assertTrue(json.loads(body)["finalized"])
        self.assertEqual(json.loads(body)["data"], head)

    def test_coalescing_and_no_cache(self):
        # slow nodes, so that the reads overlap; no hedges, so that one read is one request
        sim, mux = self.start(specs={0: "slow=400", 1: "slow=400", 2: "slow=400"},
                              config="failsafe:\n  hedge:\n    maxCount: 0\n")
        path = "/eth/v2/beacon/blocks/genesis"
        clear_requests(sim)
        results = []

        def one():
            results.append(http_request(mux.port, "GET", path, timeout=10))

        threads = [threading.Thread(target=one) for _ in range(40)]
        for t in threads:
            t.start()
        # a joiner that leaves before the answer cancels nothing for the others
        quitter = socket.create_connection(("127.0.0.1", mux.port), timeout=5)
        quitter.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        quitter.close()
        for t in threads:
            t.join(15)
        self.assertEqual(len(results), 40)
        bodies = {r[2] for r in results}
        self.assertEqual({r[0] for r in results}, {200})
        self.assertEqual(len(bodies), 1)
        self.assertEqual(requests_to(sim, "getBlockV2"), 1)
        c = self.cache_status(mux)["routes"]["block"]
        self.assertGreaterEqual(c["coalesced"], 1)
        # Cache-Control: no-cache goes to a node
        self.get(mux, path, {"Cache-Control": "no-cache"})
        self.assertEqual(requests_to(sim, "getBlockV2"), 2)
        self.assertEqual(self.cache_status(mux)["routes"]["block"]["bypassed"], 1)

    def test_gzip_and_poisoned_answers(self):
        sim, mux = self.start(args=("--block-tx-bytes", "20000"))
        path = "/eth/v2/beacon/blocks/genesis"
        st, h, plain = self.get(mux, path)
        self.assertEqual(st, 200)
        self.assertNotIn("content-encoding", h)
        st, h, z = self.get(mux, path, {"Accept-Encoding": "gzip"})
        self.assertEqual(st, 200)
        self.assertEqual(h.get("content-encoding"), "gzip")
        self.assertEqual(h.get("vary"), "Accept-Encoding")
        self.assertLess(len(z), len(plain))
        self.assertEqual(gzip.decompress(z), plain)
        self.assertEqual(h.get("eth-consensus-version"), "fulu")  # stored with the body
        # SSZ is another key
        st, h, ssz = self.get(mux, path, {"Accept": "application/octet-stream"})
        self.assertEqual(st, 200)
        self.assertEqual(h.get("content-type"), "application/octet-stream")
        self.assertEqual(h.get("x-beaconmux-cache"), "miss")
        # a 404 is never stored
        clear_requests(sim)
        for _ in range(2):
            st, _, _ = self.get(mux, "/eth/v2/beacon/blocks/0x" + "ab" * 32)
            self.assertEqual(st, 404)
        self.assertEqual(requests_to(sim, "getBlockV2"), 2)

    # ---- the front ---------------------------------------------------------------------

    def test_cors_preflight_answered_here(self):
        sim, mux = self.start(nodes=1, config="cors:\n  allowedOrigins: [\"https://app.example\"]\n")
        path = "/eth/v1/beacon/states/genesis/fork"  # nothing of beaconmux's own asks it
        clear_requests(sim)
        st, h, _ = mux.request("OPTIONS", path, headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "GET"})
        self.assertEqual(st, 204)
        hl = {k.lower(): v for k, v in h.items()}
        self.assertEqual(hl["access-control-allow-origin"], "https://app.example")
        st, h, _ = mux.request("OPTIONS", path, headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
        self.assertEqual(st, 403)
        self.assertEqual(requests_to(sim, "getStateFork"), 0)  # never proxied
        st, h, _ = self.get(mux, "/eth/v1/node/version", {"Origin": "https://app.example"})
        self.assertEqual(st, 200)
        self.assertIn("Eth-Consensus-Version", h["access-control-expose-headers"])

    def test_keys(self):
        env = {"K_OPS": "ops-secret-123", "K_DASH": "dash-secret-456"}
        config = ("auth:\n  keys:\n"
                  "    - {id: ops, secret: \"${K_OPS}\", routes: [read, duties, admin]}\n"
                  "    - {id: dash, secret: \"${K_DASH}\", routes: [read]}\n")
        sim = Beaconsim(nodes=1, slot_ms=1000)
        self.procs.append(sim)
        mux = Beaconmux(config_text=BASE + config + upstreams(sim), env=env)
        self.procs.append(mux)
        bearer = {"Authorization": "Bearer ops-secret-123"}
        wait_for(lambda: mux.request("GET", "/beaconmux/v1/status", headers=bearer)[0] == 200, 5)
        self.assertEqual(mux.request("GET", "/eth/v1/node/version")[0], 401)
        self.assertEqual(mux.request("GET", "/healthz")[0] in (200, 503), True)
        self.assertEqual(mux.request("GET", "/eth/v1/node/version",
                                     headers={"X-Api-Key": "wrong-secret"})[0], 401)
        self.assertEqual(mux.request("GET", "/eth/v1/node/version",
                                     headers={"X-Api-Key": "dash-secret-456"})[0], 200)
        basic = base64.b64encode(b"vc:ops-secret-123").decode()
        self.assertEqual(mux.request("GET", "/eth/v1/node/version",
                                     headers={"Authorization": "Basic " + basic})[0], 200)
        # a key in the path, masked from the logs
        st, _, _ = mux.request("GET", "/dash-secret-456/eth/v1/node/version")
        self.assertEqual(st, 200)
        # route classes
        dash = {"X-Api-Key": "dash-secret-456"}
        self.assertEqual(mux.request("GET", "/beaconmux/v1/status", headers=dash)[0], 403)
        self.assertEqual(mux.request("POST", "/eth/v1/validator/prepare_beacon_proposer",
                                     body=b"[]", headers=dict(dash, **{
                                         "Content-Type": "application/json"}))[0], 403)
        mux.stop()
        self.assertNotIn("dash-secret-456", "\n".join(mux.stderr()))
        self.assertNotIn("ops-secret-123", "\n".join(mux.stderr()))

    def test_credentials_never_reach_a_node(self):
        up = FakeBeacon()
        self.addCleanup(up.stop)
        config = ("auth:\n  keys:\n    - {id: k, secret: \"key-secret-789\"}\n"
                  "upstreams:\n  - url: %s\n" % up.url)
        mux = Beaconmux(config_text=BASE + config)
        self.procs.append(mux)
        # the fake node answers 404 to these: the request passed the key check and reached it
        for hdrs in ({"Authorization": "Bearer key-secret-789"}, {"X-Api-Key": "key-secret-789"}):
            st, _, _ = mux.request("GET", "/eth/v1/node/peers", headers=hdrs)
            self.assertEqual(st, 404)
        st, _, _ = mux.request("GET", "/key-secret-789/eth/v1/node/peers?x=1")
        self.assertEqual(st, 404)
        recs = up.find("GET", "/eth/v1/node/peers") + up.find("GET", "/eth/v1/node/peers?x=1")
        self.assertEqual(len(recs), 3)
        for r in recs:
            self.assertNotIn("key-secret-789", json.dumps(r["headers"]) + r["path"])

    def test_rate_limits(self):
        config = ("rateLimit:\n  perClient: {rate: 1, burst: 3}\n"
                  "trustedProxies: [\"127.0.0.1/32\"]\n")
        sim, mux = self.start(nodes=1, config=config)
        a = {"X-Forwarded-For": "10.0.0.1"}
        codes = [self.get(mux, "/eth/v1/node/version", a)[0] for _ in range(5)]
        self.assertEqual(codes[:3], [200, 200, 200])
        self.assertIn(429, codes[3:])
        st, h, body = self.get(mux, "/eth/v1/node/version", a)
        self.assertEqual(st, 429)
        self.assertIn("retry-after", h)
        self.assertEqual(json.loads(body)["code"], 429)
        # another client is unaffected
        self.assertEqual(self.get(mux, "/eth/v1/node/version", {"X-Forwarded-For": "10.0.0.2"})[0],
                         200)
        # a pool POST is never answered 429
        for _ in range(5):
            st, _, _ = mux.request("POST", "/eth/v1/beacon/pool/attestations", body=b"[]",
                                   headers=dict(a, **{"Content-Type": "application/json"}))
            self.assertNotEqual(st, 429)

    def test_two_networks(self):
        a = Beaconsim(nodes=2, slot_ms=1000, args=("--seed", "7"))
        self.procs.append(a)
        b = Beaconsim(nodes=1, slot_ms=1500, args=("--seed", "9"))
        self.procs.append(b)
        config = ("networks:\n  - id: alpha\n" + upstreams(a, "a", "    ") +
                  "  - id: beta\n" + upstreams(b, "b", "    "))
        mux = Beaconmux(config_text=BASE + config)
        self.procs.append(mux)

        def head(net):
            st, _, body = mux.request("GET", "/%s/eth/v1/beacon/headers/head" % net)
            return json.loads(body)["data"]["root"] if st == 200 else None

        wait_for(lambda: head("alpha") and head("beta"), 10, what="both networks serve")
        self.assertNotEqual(head("alpha"), head("beta"))
        wait_for(lambda: head("alpha") == a.truth()["head"]["root"] or
                 head("alpha") == a.truth()["head"]["root"], 5)
        self.assertEqual(mux.request("GET", "/gamma/eth/v1/node/version")[0], 404)
        self.assertEqual(mux.request("GET", "/eth/v1/node/version")[0], 404)
        st, _, body = mux.request("GET", "/beaconmux/v1/status")
        self.assertEqual(sorted(json.loads(body)["networks"].keys()), ["alpha", "beta"])
        st, _, body = mux.request("GET", "/alpha/beaconmux/v1/status")
        self.assertEqual([u["id"] for u in json.loads(body)["upstreams"]], ["a0", "a1"])
        self.assertEqual(mux.request("GET", "/beta/healthz")[0], 200)

    def test_secure_by_default(self):
        cfg = "listen: \"0.0.0.0:0\"\nupstreams:\n  - url: http://127.0.0.1:9\n"
        path = os.path.join(self.tmp(), "open.yaml")
        with open(path, "w") as f:
            f.write(cfg)
        r = subprocess.run([os.path.join(BIN_DIR, "beaconmux"), "--config", path],
                           capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"prepare_beacon_proposer", r.stderr)
        # --check says so too, as a warning (the file itself is valid)
        r = subprocess.run([os.path.join(BIN_DIR, "beaconmux"), "--config", path, "--check"],
                           capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"warning: listen 0.0.0.0", r.stderr)
        # an allowed-client list (or keys) lets it listen
        with open(path, "w") as f:
            f.write(cfg + "server:\n  allowedClients: [\"10.0.0.0/8\"]\n")
        r = subprocess.run([os.path.join(BIN_DIR, "beaconmux"), "--config", path, "--check"],
                           capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 0)
        self.assertNotIn(b"warning: listen", r.stderr)
        st = self.bad_network_id()
        self.assertIn(b"would shadow", st)

    def bad_network_id(self):
        path = os.path.join(self.tmp(), "bad.yaml")
        with open(path, "w") as f:
            f.write("networks:\n  - id: eth\n    upstreams:\n      - url: http://127.0.0.1:9\n")
        r = subprocess.run([os.path.join(BIN_DIR, "beaconmux"), "--config", path, "--check"],
                           capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        return r.stderr

    def tmp(self):
        import tempfile
        d = tempfile.mkdtemp(prefix="bm-edge-")
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        return d


if __name__ == "__main__":
    main()
