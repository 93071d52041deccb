# SPDX-License-Identifier: MIT
"""The cluster event stream end to end: beaconsim behind beaconmux, subscribers on
loopback, every head scored against /sim/v1/truth.

Delivery latency is measured with the kernel's receive timestamps (SO_TIMESTAMPNS) of
one single-threaded reader that holds the beaconmux subscription and one direct
subscription per node, so the difference is beaconmux's own delay, not the test's.

Classes:
- Heads: nodes lagging 0 / 300 / 2000 ms. Every cluster head exactly once and fast
  (p50/p99 printed), through a restart of the fastest node; blocks once each; the fastest
  node forked onto its own branch is not followed once it is known forked.
- Styles: two beaconmux instances on one chain, one over plain nodes (one of them behind
  a proxy that refuses one extra topic with 400 and hangs on another), one over a
  Lighthouse-style node and a fragmented CRLF node: the same downstream events.
"""
import bisect
import json
import os
import re
import selectors
import socket
import struct
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from harness import (QUICK_NODES, Beaconmux, Beaconsim, main, now_ms, sleep_until,  # noqa: E402
                     wait_for)

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SLOT_MS = 1200  # not 1000: discovery refreshes 1 s into each epoch, on a slot start then
CONFIG = QUICK_NODES + """events:
  headersTimeout: 1s
"""

def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


# ---- a single-threaded SSE reader with kernel timestamps ------------------------------------

class SSEConn:
    """One event stream on a raw socket: head, chunked body, SSE events with arrival times."""

    def __init__(self, port, path, name, accept="text/event-stream"):
        self.name = name
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: %s\r\n\r\n"
                           % (path, accept)).encode())
        self.sock.setblocking(False)
        self.raw = b""
        self.status = None
        self.head = None
        self.chunked = False
        self.body = b""
        self.sse = b""
        self.events = []  # (topic, data, t_seconds)
        self.closed = False
        self.lock = threading.Lock()

    def on_readable(self):
        try:
            data, anc, _, _ = self.sock.recvmsg(1 << 16, 256)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, anc = b"", []
        ts = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = struct.unpack("qq", payload[:16])
                ts = sec + nsec / 1e9
        if ts is None:
            ts = time.time()
        if not data:
            self.closed = True
            return
        self.raw += data
        self._parse(ts)

    def _parse(self, ts):
        if self.head is None:
            i = self.raw.find(b"\r\n\r\n")
            if i < 0:
                return
            self.head = self.raw[:i].decode("latin-1")
            self.status = int(self.head.split(" ", 2)[1])
            self.chunked = "transfer-encoding: chunked" in self.head.lower()
            self.raw = self.raw[i + 4:]
        if self.chunked:
            while True:
                j = self.raw.find(b"\r\n")
                if j < 0:
                    break
                size = int(self.raw[:j].split(b";")[0], 16)
                if size == 0:
                    self.closed = True
                    self.raw = b""
                    break
                if len(self.raw) < j + 2 + size + 2:
                    break
                self.sse += self.raw[j + 2:j + 2 + size]
                self.raw = self.raw[j + 4 + size:]
        else:
            self.sse += self.raw
            self.raw = b""
        self.sse = self.sse.replace(b"\r\n", b"\n")
        while True:
            k = self.sse.find(b"\n\n")
            if k < 0:
                break
            block, self.sse = self.sse[:k].decode(), self.sse[k + 2:]
            topic, data = None, []
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                f, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                if f == "event":
                    topic = v
                elif f == "data":
                    data.append(v)
            if topic and data:
                with self.lock:
                    self.events.append((topic, "\n".join(data), ts))

    def snapshot(self, topic=None):
        with self.lock:
            return [e for e in self.events if topic is None or e[0] == topic]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Reader(threading.Thread):
    """Reads every registered stream from one thread (selectors), recording arrivals."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sel = selectors.DefaultSelector()
        self.pending = []
        self.closing = []
        self.lock = threading.Lock()
        self.stopped = False
        self.start()

    def add(self, conn):
        with self.lock:
            self.pending.append(conn)
        return conn

    def close(self, conn):
        """Closes a stream from the reader's own thread (a socket closed under the selector
        would leave its descriptor registered for the next socket to get it)."""
        done = threading.Event()
        with self.lock:
            self.closing.append((conn, done))
        done.wait(2)

    def run(self):
        while not self.stopped:
            with self.lock:
                for c in self.pending:
                    self.sel.register(c.sock, selectors.EVENT_READ, c)
                self.pending = []
                for c, done in self.closing:
                    if c.sock in self.sel.get_map():
                        self.sel.unregister(c.sock)
                    c.close()
                    done.set()
                self.closing = []
            for key, _ in self.sel.select(0.05):
                c = key.data
                c.on_readable()
                if c.closed:
                    self.sel.unregister(c.sock)

    def stop(self):
        self.stopped = True
        self.join(2)


class CpuWait(threading.Thread):
    """Samples how long a process has waited for a CPU so far (run_delay in
    /proc/PID/schedstat: time runnable but not running), every 2 ms, with the wall time.
    Sampling, not synchronisation: it only reads."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.path = "/proc/%d/schedstat" % pid
        self.times, self.waits = [], []  # time.time(), waited seconds
        self.stopped = False

    def run(self):
        while not self.stopped:
            try:
                with open(self.path) as f:
                    w = int(f.read().split()[1]) / 1e9
            except (OSError, ValueError, IndexError):
                return
            self.times.append(time.time())
            self.waits.append(w)
            time.sleep(0.002)

    def stop(self):
        self.stopped = True
        self.join(2)

    def waited_ms(self, t0, t1):
        """How long the process waited for a CPU between t0 and t1, at most: from the last
        sample at or before t0 to the first at or after t1."""
        i = bisect.bisect_right(self.times, t0) - 1
        j = bisect.bisect_left(self.times, t1)
        if i < 0 or j >= len(self.times):
            return 0.0
        return (self.waits[j] - self.waits[i]) * 1000.0


def slot_of(topic, data):
    d = json.loads(data)
    if "data" in d and "version" in d:
        d = d["data"]
    if topic == "payload_attributes":
        return int(d["proposal_slot"])
    if topic == "finalized_checkpoint":
        return int(d["epoch"]) * 8
    return int(d["slot"])


def root_of(topic, data):
    d = json.loads(data)
    if "data" in d and "version" in d:
        d = d["data"]
    return d.get("block") or d.get("new_head_block") or d.get("parent_block_root")


class Heads(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.setswitchinterval(0.0005)
        cls.sim = Beaconsim(nodes=3, slot_ms=SLOT_MS, slots_per_epoch=8,
                            node_specs={0: "lag=0", 1: "lag=300", 2: "lag=2000"})
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(cls.sim.nodes))
        cls.mux = Beaconmux(config_text=CONFIG + ups)
        cls.reader = Reader()
        try:
            wait_for(lambda: cls.mux.status().get("cluster_head"), 15, what="a cluster head")
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.reader.stop()
        rc = cls.mux.stop()
        cls.sim.stop()
        assert rc == 0, "beaconmux exited with %s:\n%s" % (rc, "\n".join(cls.mux.stderr()[-30:]))

    def port_of(self, i):
        return int(self.sim.nodes[i].rsplit(":", 1)[1])

    def current_slot(self):
        return self.sim.truth()["current_slot"]

    def wait_slot_point(self, slot, off_ms):
        sleep_until(self.sim.truth(slot)["start_ms"] + off_ms)

    def canonical(self, s):
        t = self.sim.truth(s)
        return t["root"] if t.get("canonical") and t.get("root") and not t.get("skipped") else None

    def test_1_every_head_once_fast_and_through_a_restart(self):
        mux = self.reader.add(SSEConn(self.mux.port, "/eth/v1/events?topics=head&topics=block,"
                                      "chain_reorg", "mux"))
        # (beaconsim answers 406 to a bare `Accept: text/event-stream`)
        direct = [self.reader.add(SSEConn(self.port_of(i), "/eth/v1/events?topics=head", "n%d" % i,
                                          accept="text/event-stream, */*;q=0.1"))
                  for i in range(3)]
        cpu_wait = CpuWait(self.mux.p.pid)  # how long beaconmux waited for a CPU, and when
        cpu_wait.start()
        self.addCleanup(cpu_wait.stop)
        wait_for(lambda: mux.status == 200 and all(d.status == 200 for d in direct), 5,
                 what="the streams' heads")
        self.assertIn("content-type: text/event-stream", mux.head.lower())
        self.assertIn("cache-control: no-cache", mux.head.lower())
        s0 = self.current_slot() + 1
        measure_end = s0 + 22
        # the fastest node dies for three slots in the middle of the run
        kill_at = measure_end + 1
        end = kill_at + 7
        self.wait_slot_point(kill_at, 150)
        self.sim.put_node(0, {"down": True})
        self.wait_slot_point(kill_at + 3, 150)
        self.sim.put_node(0, {"down": False})
        # the last slot's head (when it has a block) is awaited until the slot after starts
        self.wait_slot_point(end, 0)
        if self.canonical(end):
            last = self.sim.truth(end + 1)["start_ms"]
            try:
                wait_for(lambda: any(slot_of(tp, d) == end for tp, d, _ in mux.snapshot("head")),
                         max(0.0, (last - now_ms()) / 1000.0), what="slot %d's head" % end)
            except AssertionError:
                pass  # the per-slot check below names what is missing

        heads = mux.snapshot("head")
        by_slot = {}
        for topic, data, ts in heads:
            by_slot.setdefault(slot_of(topic, data), []).append((root_of(topic, data), ts))
        # every canonical head exactly once, nothing else
        lat = []
        own = []  # the same delays less the time beaconmux waited for a CPU meanwhile
        for s in range(s0, end + 1):
            root = self.canonical(s)
            got = by_slot.get(s, [])
            if root is None:
                self.assertEqual(got, [], "slot %d has no canonical block but got %s" % (s, got))
                continue
            self.assertEqual([r for r, _ in got], [root],
                             "slot %d: want exactly %s once, got %s" % (s, root, got))
            if s < measure_end:
                firsts = [ts for d in direct for (tp, dd, ts) in d.snapshot("head")
                          if slot_of(tp, dd) == s and root_of(tp, dd) == root]
                self.assertTrue(firsts, "no node announced slot %d directly" % s)
                lat.append((got[0][1] - min(firsts)) * 1000.0)
                own.append(lat[-1] - cpu_wait.waited_ms(min(firsts), got[0][1]))
        for s in by_slot:
            self.assertTrue(s0 - 1 <= s <= end + 1, "head for an unexpected slot %d" % s)
        self.assertEqual(mux.snapshot("chain_reorg"), [])
        p50, p99 = pct(lat, 50), pct(lat, 99)
        if os.environ.get("BM_EVENTS_LATENCIES"):
            print("latencies (ms): %s" % " ".join("%.2f" % x for x in lat), file=sys.stderr)
        print("\nhead delivery vs the earliest node (%d slots): p50 %.2f ms, p99 %.2f ms, max %.2f ms"
              % (len(lat), p50, p99, max(lat)), file=sys.stderr)
        print("the same less beaconmux's waits for a CPU meanwhile: p50 %.2f ms, p99 %.2f ms"
              % (pct(own, 50), pct(own, 99)), file=sys.stderr)
        self.assertGreaterEqual(len(lat), 20)
        self.assertLess(p50, 5.0)
        # The tail (p99 of 20 samples: the worst) is mostly the machine's scheduling: when
        # the two cores are busy, beaconmux may be runnable with an event in hand and wait
        # tens of ms for a core (32 and 81 ms were seen beside two busy loops), so a fixed
        # bound on the raw delay cannot hold. What the kernel measured in the same run
        # (run_delay: runnable, not running) is taken off each delay, and the rest, the
        # delay of beaconmux's own making (a timer, a batch, work queued before the event),
        # has the bound: 25 ms (the debug build runs under ASan; the release figure is in
        # docs/events.md). On a quiet machine the waits are near zero and nothing changes.
        self.assertLess(pct(own, 99), 25.0)
        # block events: one per block, canonical slots all present
        blocks = {}
        for topic, data, _ in mux.snapshot("block"):
            blocks.setdefault(root_of(topic, data), []).append(slot_of(topic, data))
        for r, slots in blocks.items():
            self.assertEqual(len(slots), 1, "block %s sent %d times" % (r, len(slots)))
        for s in range(s0, end + 1):
            root = self.canonical(s)
            if root:
                self.assertIn(root, blocks, "no block event for slot %d" % s)
        # the restarted node came back
        wait_for(lambda: self.mux.node_states()["n0"] == "ready", 8, what="n0 ready again")
        for c in [mux] + direct:
            self.reader.close(c)

    def test_2_forked_fastest_node_is_not_followed(self):
        mux = self.reader.add(SSEConn(self.mux.port, "/eth/v1/events?topics=head,chain_reorg", "mux"))
        wait_for(lambda: mux.status == 200, 5, what="the stream's head")
        self.mux.wait_state("n0", "ready", timeout=8)
        self.sim.put_node(0, {"fork": True})
        try:
            self.mux.wait_state("n0", "forked", timeout=8)
            t_forked = time.time()
            last = self.current_slot() + 3
            self.wait_slot_point(last, 600)
            branch = {self.sim.node(0)["data"]["head"]["root"]}
            heads = mux.snapshot("head")
            before = [(slot_of(t, d), root_of(t, d)) for t, d, ts in heads if ts < t_forked]
            after = [(slot_of(t, d), root_of(t, d)) for t, d, ts in heads if ts >= t_forked]
            self.assertTrue(after, "no head after n0 became forked")
            for s, r in after:
                self.assertEqual(r, self.canonical(s), "slot %d: a non-canonical head after "
                                 "n0 was known forked" % s)
                self.assertNotIn(r, branch)
            # what went out before the tracker could know (a branch block that extends the
            # cluster head is the fastest honest node's, as far as anyone can tell) was
            # followed by a chain_reorg back to the canonical chain
            early = [(s, r) for s, r in before if r != self.canonical(s)]
            if early:
                reorgs = [json.loads(d) for t, d, _ in mux.snapshot("chain_reorg")]
                self.assertTrue(any(self.canonical(int(x["slot"])) == x["new_head_block"]
                                    for x in reorgs), reorgs)
            print("\nforked fastest node: %d branch head(s) sent before it was known forked, "
                  "none after" % len(early), file=sys.stderr)
            s, r = slot_of("head", heads[-1][1]), root_of("head", heads[-1][1])
            self.assertEqual(r, self.canonical(s))
        finally:
            self.sim.put_node(0, {"fork": False})
            self.reader.close(mux)
        self.mux.wait_state("n0", "ready", timeout=10)


# ---- a proxy that refuses or hangs on chosen event topics ----------------------------------------

class TopicProxy:
    """Forwards to one node, one request per connection; /eth/v1/events asking for a
    `reject` topic gets 400, asking for a `hang` topic gets no answer at all."""

    def __init__(self, upstream, reject=(), hang=()):
        u = urllib.parse.urlparse(upstream)
        self.up = (u.hostname, u.port)
        self.reject, self.hang = set(reject), set(hang)
        self.requests = []  # topic lists asked on /eth/v1/events
        self.lock = threading.Lock()
        self.held = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(1 << 16)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, c):
        data = b""
        c.settimeout(5)
        try:
            while b"\r\n\r\n" not in data:
                d = c.recv(8192)
                if not d:
                    c.close()
                    return
                data += d
        except OSError:
            c.close()
            return
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        target = lines[0].split(" ")[1]
        path, _, query = target.partition("?")
        if path == "/eth/v1/events":
            topics = []
            for k, v in urllib.parse.parse_qsl(query):
                if k == "topics":
                    topics += v.split(",")
            with self.lock:
                self.requests.append(topics)
            bad = [t for t in topics if t in self.reject]
            if bad:
                body = json.dumps({"code": 400, "message": "Invalid topic: %s" % bad[0]}).encode()
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                          b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                c.close()
                return
            if any(t in self.hang for t in topics):
                with self.lock:
                    self.held.append(c)  # never answered
                return
        out = [lines[0]] + [x for x in lines[1:] if not x.lower().startswith("connection:")]
        out.append("Connection: close")
        try:
            u = socket.create_connection(self.up, timeout=5)
            u.settimeout(None)
            c.settimeout(None)
            u.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rest)
        except OSError:
            c.close()
            return
        threading.Thread(target=self._pump, args=(u, c), daemon=True).start()
        self._pump(c, u)

    def asked(self):
        with self.lock:
            return list(self.requests)

    def stop(self):
        self.stopped = True
        self.sock.close()
        with self.lock:
            for c in self.held:
                c.close()


EXTRA = ("head", "head_v2", "block", "block_gossip", "payload_attributes", "finalized_checkpoint")


class Styles(unittest.TestCase):
    """Plain nodes (one behind a proxy refusing block_gossip and hanging on
    payload_attributes) against a Lighthouse-style and a fragmented CRLF node."""

    def test_same_events_whatever_the_node_streams(self):
        sim = Beaconsim(nodes=4, slot_ms=SLOT_MS, slots_per_epoch=8, node_specs={
            0: "lag=0", 1: "lag=0", 2: "lag=0,sse-style=lighthouse", 3: "lag=0,sse-fragment"})
        proxy = TopicProxy(sim.nodes[0], reject=("block_gossip",), hang=("payload_attributes",))
        reader = Reader()
        muxes = []
        try:
            for ups in ((proxy.url, sim.nodes[1]), (sim.nodes[2], sim.nodes[3])):
                text = CONFIG + "upstreams:\n" + "".join(
                    "  - id: n%d\n    url: %s\n" % (i, u) for i, u in enumerate(ups))
                muxes.append(Beaconmux(config_text=text))
            for m in muxes:
                wait_for(lambda m=m: m.status().get("cluster_head"), 15, what="a cluster head")
            q = "/eth/v1/events?topics=" + ",".join(EXTRA)
            subs = [reader.add(SSEConn(m.port, q, "mux%d" % i)) for i, m in enumerate(muxes)]
            wait_for(lambda: all(s.status == 200 for s in subs), 5, what="the streams' heads")
            # the proxied node's extra stream: each topic probed alone; the refused and the
            # hanging one are left out, the others served
            muxes[0].wait_line(r"node n0 does not serve topic block_gossip \(HTTP 400", 10)
            muxes[0].wait_line(r"node n0 does not serve topic payload_attributes \(no response "
                               r"headers", 10)
            wait_for(lambda: any(sorted(t) == ["block_gossip"] for t in proxy.asked()), 5,
                     what="a probe of block_gossip alone")
            s0 = sim.truth()["current_slot"] + 2
            s1 = s0 + 5
            sleep_until(sim.truth(s1 + 1)["start_ms"] + 600)
            # the node's head feed never suffered: its main stream stayed up, it is ready
            ups0 = {u["id"]: u for u in muxes[0].status()["upstreams"]}
            self.assertEqual(ups0["n0"]["state"], "ready", ups0["n0"])
            for topics in proxy.asked():
                if "head_v2" in topics or "head" in topics:
                    self.assertNotIn("block_gossip", topics)
                    self.assertNotIn("payload_attributes", topics)

            def window(sub):
                out = {}
                for topic, data, _ in sub.snapshot():
                    s = slot_of(topic, data)
                    if s0 <= s <= s1:
                        out.setdefault(topic, []).append(data)
                return out

            a, b = window(subs[0]), window(subs[1])
            for t in EXTRA:
                self.assertTrue(a.get(t) or t == "finalized_checkpoint", "no %s event" % t)
                self.assertEqual(a.get(t), b.get(t), "topic %s differs:\n%s\n%s"
                                 % (t, a.get(t), b.get(t)))
            for t in ("head", "head_v2", "block", "block_gossip", "payload_attributes"):
                self.assertEqual(len(a[t]), len(set(a[t])), "duplicates in %s" % t)
                self.assertEqual(len(a[t]), s1 - s0 + 1, "%s: %d events for %d slots"
                                 % (t, len(a[t]), s1 - s0 + 1))
        finally:
            reader.stop()
            rcs = [m.stop() for m in muxes]
            proxy.stop()
            sim.stop()
        self.assertEqual(rcs, [0] * len(muxes))


if __name__ == "__main__":
    main()
