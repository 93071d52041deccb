#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The soak: beaconmux in front of beaconsim for a long while, under every kind of client at once.

`make soak` runs it (SOAK_SECONDS, default 1800; SOAK_BUILD=release or debug). Traffic, all at
the same time, for the whole run:
  - duty races: every slot, four "validators" ask for the slot's attestation data at once at
    the attestation due time, and one asks for the slot's block (produce v3);
  - broadcast writes: every slot, attestations with a unique signature each, so that
    each one can be found in what every node recorded;
  - ordinary reads on keep-alive connections (headers, blocks, finality, syncing, spec);
  - event subscribers, each reconnecting now and then;
  - hostile clients: slowloris heads, clients that ask for large blocks and never read,
    clients that reset (RST) their connection mid-request or mid-answer;
  - node chaos: every CHAOS period one node is killed (port closed), hung or made slow for a
    while, then restored, in turn, so that the others stay up.

Every SAMPLE seconds it records beaconmux's RSS, open file descriptors, its TCP connections
to the nodes and from clients, and the latencies of the period. It FAILS when:
  - beaconmux exits (a crash), or, on the sanitizer build, its stderr reports an error or a
    leak, or it does not exit 0 on SIGTERM;
  - a duty answer is lost (no 200) or wrong (another slot, or a block root that is not the
    truth's root at that slot);
  - a broadcast was not recorded by every node that was up for all of its write window;
  - after warm-up, RSS passes RSS_BOUND times its warm-up value or descriptors pass the
    warm-up value plus what the hostile clients may hold;
  - at the end, in the same quiet state as after warm-up (no clients), RSS or descriptors are
    not back within 10 % of the warm-up values (RSS is judged on the release build only:
    ASan's quarantine keeps freed memory);
  - event subscribers go without an event for longer than a few slots, or reads fail
    more than READ_ERROR_SHARE of the time.
It prints a timeline and a summary, and writes both as JSON with --json.
"""
import argparse
import collections
import http.client
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Proc  # noqa: E402

SIG = "0x" + "cc" * 96
ROOT = "0x" + "ab" * 32
SLOT_MS = 2000
ATTESTERS_PER_SLOT = 4  # concurrent identical attestation_data requests: one race
WRITES_PER_SLOT = 2
READERS = 4
SUBSCRIBERS = 3
SLOWLORIS = 30
NEVER_READING = 4  # at most this many open at once
READ_ERROR_SHARE = 0.01
SUBSCRIBER_GAP_SLOTS = 6
RSS_BOUND = 1.5  # during the run, relative to the warm-up value
END_TOLERANCE = 0.10  # at the end, relative to the warm-up value (the 10 %)

CONFIG = """
log:
  level: warn
timeouts:
  connect: 300ms
  read: 1s
server:
  headerTimeout: 3s
  bodyDeadline: 10s
  sendTimeout: 5s
  idleTimeout: 30s
discovery:
  retryInterval: 500ms
duties:
  writeTimeout: 4s
cache:
  maxBytes: 8MiB
"""
# The cache is kept small so that it is full (at its bound) before the warm-up ends: each slot's
# head block (--block-tx-bytes) is a new entry, and at the default 64 MiB the cache would still
# be filling for minutes, growth that is the cache's bound being reached, not a leak.
WRITE_TIMEOUT_S = 4.0
SEND_TIMEOUT_S = 5.0


def now_ms():
    return int(time.time() * 1000)


class Child(Proc):
    """A child process whose output is drained into a bounded tail (a long run must not keep
    every line), counting sanitizer reports; started and stopped as the integration tests'."""

    SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:")
    TAIL = 400

    def __init__(self, args, env=None):
        self.sanitizer_lines = []  # before the pumps start
        super().__init__(args, env)

    def _keep(self, lines, line):
        lines.append(line)
        if len(lines) > 2 * self.TAIL:
            del lines[:-self.TAIL]
        if self.SANITIZER.search(line) and len(self.sanitizer_lines) < 50:
            self.sanitizer_lines.append(line)

    def tail(self, n=40):
        return self.stderr()[-n:]


def request(port, method, path, body=None, headers=None, timeout=10.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


class Soak:
    def __init__(self, a):
        self.a = a
        self.stop = threading.Event()
        self.paused = threading.Event()  # set: clients hold off (the quiet points)
        self.lock = threading.Lock()
        self.failures = []
        self.counts = collections.Counter()
        self.lat = collections.defaultdict(list)  # kind -> [(t, seconds)]
        self.samples = []
        self.chaos_log = []  # (node, t_start, t_end)
        self.writes = {}  # attester index -> (t_sent, t_answered)
        self.recorded = collections.defaultdict(set)  # node -> attester indexes seen
        self.last_event = {}
        self.max_event_gap = 0.0

    # ---- bookkeeping ---------------------------------------------------------------------------

    def fail(self, what):
        with self.lock:
            self.counts["failures"] += 1
            if len(self.failures) < 40:
                self.failures.append("%7.1fs %s" % (time.monotonic() - self.t0, what))
        print("FAIL:", what, file=sys.stderr, flush=True)

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def latency(self, kind, seconds):
        with self.lock:
            self.lat[kind].append((time.monotonic() - self.t0, seconds))

    def sim_json(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        st, raw = request(self.control_port, method, path, data,
                          {"Content-Type": "application/json"} if data else None)
        if not 200 <= st < 300:
            raise RuntimeError("sim %s %s: %d %r" % (method, path, st, raw[:200]))
        return json.loads(raw) if raw else None

    def running(self):
        return not self.stop.is_set()

    def hold_while_paused(self):
        while self.paused.is_set() and self.running():
            time.sleep(0.05)

    # ---- start and stop ------------------------------------------------------------------------

    def start(self):
        bins = self.a.bin_dir
        self.sim = Child([os.path.join(bins, "beaconsim"), "--nodes", "3", "--base-port", "0",
                          "--slot-ms", str(SLOT_MS), "--slots-per-epoch", "8",
                          "--block-tx-bytes", "200000", "--log-level", "warn"])
        m = self.sim.wait_line(r"^control http://127\.0\.0\.1:(\d+)", timeout=15.0, stream="stdout")
        self.control_port = int(m.group(1))
        self.node_urls = [ln.split()[2] for ln in self.sim.stdout() if ln.startswith("node ")]
        self.node_ports = {int(u.rsplit(":", 1)[1]) for u in self.node_urls}
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(self.node_urls))
        self.config_path = os.path.join(self.a.workdir, "soak.yaml")
        with open(self.config_path, "w") as f:
            f.write(CONFIG + ups)
        self.mux = Child([os.path.join(bins, "beaconmux"), "--listen", "127.0.0.1:0",
                          "--config", self.config_path, "--log-level", "warn",
                          "--no-wait"])
        # warn level: the listening line is info; read the port from the status instead
        self.port = self.find_listen_port()
        self.t0 = time.monotonic()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st, raw = request(self.port, "GET", "/beaconmux/v1/status")
            states = [u["state"] for u in json.loads(raw)["upstreams"]] if st == 200 else []
            if states and all(s == "ready" for s in states):
                return
            time.sleep(0.1)
        raise RuntimeError("nodes not ready: %s" % states)

    def find_listen_port(self):
        """beaconmux's listening socket: the one TCP socket of its own in LISTEN state."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.mux.p.poll() is not None:
                raise RuntimeError("beaconmux exited: %s" % "\n".join(self.mux.tail()))
            for c in self.tcp_sockets():
                if c["state"] == "0A":
                    return c["local_port"]
            time.sleep(0.05)
        raise RuntimeError("beaconmux does not listen")

    def tcp_sockets(self):
        """beaconmux's TCP sockets (IPv4 loopback), from its fd table and /proc/net/tcp."""
        pid = self.mux.p.pid
        inodes = set()
        fd_dir = "/proc/%d/fd" % pid
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        out = []
        with open("/proc/%d/net/tcp" % pid) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[9] in inodes:
                    out.append({"local_port": int(parts[1].split(":")[1], 16),
                                "remote_port": int(parts[2].split(":")[1], 16),
                                "state": parts[3]})
        return out

    # ---- measurement ---------------------------------------------------------------------------

    def sample(self):
        pid = self.mux.p.pid
        rss = 0
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        fds = len(os.listdir("/proc/%d/fd" % pid))
        socks = self.tcp_sockets()
        up = sum(1 for s in socks if s["state"] == "01" and s["remote_port"] in self.node_ports)
        clients = sum(1 for s in socks if s["state"] == "01" and s["local_port"] == self.port)
        return {"t": round(time.monotonic() - self.t0, 1), "rss_kb": rss, "fds": fds,
                "upstream_conns": up, "client_conns": clients}

    def sampler(self):
        last = 0.0
        while self.running():
            if self.mux.p.poll() is not None:
                self.fail("beaconmux exited with %s; last lines:\n%s" % (
                    self.mux.p.returncode, "\n".join(self.mux.tail())))
                self.stop.set()
                return
            if self.sim.p.poll() is not None:
                self.fail("beaconsim exited with %s" % self.sim.p.returncode)
                self.stop.set()
                return
            t = time.monotonic() - self.t0
            if t - last >= self.a.sample:
                last = t
                s = self.sample()
                with self.lock:
                    s["duty_p99_ms"] = self.window_p("duty", t - self.a.sample, 0.99)
                    s["read_p99_ms"] = self.window_p("read", t - self.a.sample, 0.99)
                    self.samples.append(s)
                if self.bound is not None:
                    self.check_bound(s)
            time.sleep(0.2)

    def window_p(self, kind, since, p):
        v = percentile([x for (t, x) in self.lat[kind] if t >= since], p)
        return None if v is None else round(v * 1000, 1)

    def check_bound(self, s):
        b = self.bound
        if s["rss_kb"] > b["rss_kb"] * RSS_BOUND and not self.a.sanitizer:
            self.fail("RSS %d kB past %.1f x the warm-up %d kB" % (s["rss_kb"], RSS_BOUND,
                                                                 b["rss_kb"]))
        if s["fds"] > b["fd_bound"]:
            self.fail("%d descriptors, past the bound %d" % (s["fds"], b["fd_bound"]))

    def quiet_point(self, what):
        """Stops every client, waits (bounded) until beaconmux holds no client connection and no
        more upstream connections than its event streams need, and samples."""
        self.paused.set()
        deadline = time.monotonic() + 60
        s = self.sample()
        while time.monotonic() < deadline:
            s = self.sample()
            if s["client_conns"] == 0:
                break
            time.sleep(0.2)
        else:
            self.fail("%s: %d client connections still open after 60s" % (what, s["client_conns"]))
        # the last answers' buffers and detached writes settle; sample twice, keep the later
        time.sleep(WRITE_TIMEOUT_S)
        s = self.sample()
        s["what"] = what
        print("quiet point (%s): %s" % (what, s), flush=True)
        return s

    # ---- clients -------------------------------------------------------------------------------

    def truth(self, slot=None):
        return self.sim_json("GET", "/sim/v1/truth" + ("" if slot is None else "?slot=%d" % slot))

    def sleep_until_ms(self, t_ms):
        while self.running():
            d = (t_ms - now_ms()) / 1000.0
            if d <= 0:
                return True
            time.sleep(min(d, 0.5))
        return False

    def duty_clock(self):
        """One loop per slot: the attestation race and the block production of that slot."""
        slot = self.truth()["current_slot"] + 1
        while self.running():
            t = self.truth(slot)
            if not self.sleep_until_ms(t["start_ms"] + 100):
                return
            self.hold_while_paused()
            if not self.running():
                return
            if self.truth()["current_slot"] != slot:
                slot = self.truth()["current_slot"] + 1  # paused past this slot's start
                continue
            threading.Thread(target=self.produce, args=(slot,), daemon=True).start()
            for i in range(WRITES_PER_SLOT):
                threading.Thread(target=self.write, args=(slot,), daemon=True).start()
            if not self.sleep_until_ms(t["attestation_due_ms"]):
                return
            threads = [threading.Thread(target=self.attest, args=(slot,), daemon=True)
                       for _ in range(ATTESTERS_PER_SLOT)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(15)
            slot += 1

    def attest(self, slot):
        t0 = time.monotonic()
        try:
            st, raw = request(self.port, "GET", "/eth/v1/validator/attestation_data?slot=%d"
                              "&committee_index=0" % slot, timeout=SLOT_MS / 1000.0 * 2)
        except OSError as e:
            self.fail("attestation_data slot %d lost: %s" % (slot, e))
            return
        self.latency("duty", time.monotonic() - t0)
        self.count("duty_attest")
        if st != 200:
            self.fail("attestation_data slot %d: %d %r" % (slot, st, raw[:200]))
            return
        data = json.loads(raw)["data"]
        truth = self.truth(slot)
        if data["slot"] != str(slot) or data["beacon_block_root"] != truth["block_root_at_slot"]:
            self.fail("attestation_data slot %d wrong: slot %s root %s, truth %s" % (
                slot, data["slot"], data["beacon_block_root"], truth["block_root_at_slot"]))

    def produce(self, slot):
        t0 = time.monotonic()
        try:
            st, raw = request(self.port, "GET", "/eth/v3/validator/blocks/%d?randao_reveal=%s"
                              % (slot, SIG), timeout=SLOT_MS / 1000.0 * 2)
        except OSError as e:
            self.fail("produce slot %d lost: %s" % (slot, e))
            return
        self.latency("duty", time.monotonic() - t0)
        self.count("duty_produce")
        if st != 200:
            self.fail("produce slot %d: %d %r" % (slot, st, raw[:200]))
            return
        block = json.loads(raw)["data"]
        block = block.get("block", block)
        if block.get("slot") != str(slot):
            self.fail("produce slot %d wrong: a block of slot %s" % (slot, block.get("slot")))

    def write(self, slot):
        with self.lock:
            index = len(self.writes) + 1
            self.writes[index] = (time.monotonic() - self.t0, None)
        # the sim knows a few validators only: the signature carries the broadcast's number
        body = json.dumps([{"committee_index": "0", "attester_index": str(index % 32), "data": {
            "slot": str(slot), "index": "0", "beacon_block_root": ROOT,
            "source": {"epoch": "0", "root": ROOT}, "target": {"epoch": "0", "root": ROOT}},
            "signature": "0x%0192x" % index}]).encode()
        t0 = time.monotonic()
        try:
            st, raw = request(self.port, "POST", "/eth/v2/beacon/pool/attestations", body,
                              {"Content-Type": "application/json",
                               "Eth-Consensus-Version": self.fork}, timeout=WRITE_TIMEOUT_S + 2)
        except OSError as e:
            self.fail("broadcast %d lost: %s" % (index, e))
            return
        self.latency("write", time.monotonic() - t0)
        self.count("writes")
        with self.lock:
            self.writes[index] = (self.writes[index][0], time.monotonic() - self.t0)
        if st != 200:
            self.fail("broadcast %d: %d %r" % (index, st, raw[:200]))

    def collect_submissions(self):
        """Follows every node's submission log, keeping the numbers (signatures) of the broadcasts it recorded."""
        since = {}
        while True:
            for i in range(len(self.node_urls)):
                q = "" if i not in since else "?since=%d" % since[i]
                got = self.sim_json("GET", "/sim/v1/nodes/%d/submissions%s" % (i, q))
                if got.get("dropped"):
                    self.fail("node %d's submission log dropped %s entries" % (i, got["dropped"]))
                for rec in got["data"]:
                    if rec["route"] == "submitPoolAttestationsV2" and isinstance(rec.get("body"), list):
                        for item in rec["body"]:
                            with self.lock:
                                self.recorded[i].add(int(item.get("signature", "0x0"), 16))
                since[i] = got.get("last_seq", since.get(i, 0))
            if not self.running():
                return
            time.sleep(2)

    def reader(self, seed):
        rnd = random.Random(seed)
        paths = ["/eth/v1/beacon/headers/head", "/eth/v1/beacon/states/head/finality_checkpoints",
                 "/eth/v1/node/syncing", "/eth/v1/config/spec", "/eth/v1/beacon/genesis",
                 "/eth/v2/beacon/blocks/head", "/eth/v1/beacon/blocks/head/root"]
        conn = None
        while self.running():
            if self.paused.is_set() and conn is not None:
                conn.close()
                conn = None
            self.hold_while_paused()
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            path = rnd.choice(paths)
            t0 = time.monotonic()
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                self.latency("read", time.monotonic() - t0)
                self.count("reads")
                if r.status != 200:
                    self.count("read_errors")
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                self.count("reads")
                self.count("read_errors")
                conn.close()
                conn = None
            time.sleep(0.05)
        if conn is not None:
            conn.close()

    def subscriber(self, n):
        rnd = random.Random(1000 + n)
        while self.running():
            self.hold_while_paused()
            if not self.running():
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            except OSError:
                self.count("subscriber_connect_errors")
                time.sleep(0.5)
                continue
            s.sendall(b"GET /eth/v1/events?topics=head,block HTTP/1.1\r\nHost: x\r\n"
                      b"Accept: text/event-stream\r\n\r\n")
            until = time.monotonic() + rnd.uniform(20, 90)
            key = "sub%d" % n
            with self.lock:
                self.last_event[key] = time.monotonic()
            try:
                while self.running() and not self.paused.is_set() and time.monotonic() < until:
                    try:
                        chunk = s.recv(65536)
                    except socket.timeout:
                        chunk = None
                    now = time.monotonic()
                    with self.lock:
                        gap = now - self.last_event[key]
                        if gap > self.max_event_gap:
                            self.max_event_gap = gap
                    if chunk == b"":
                        self.count("subscriber_ended")
                        break
                    if chunk and b"event:" in chunk:
                        self.count("events", chunk.count(b"event:"))
                        with self.lock:
                            self.last_event[key] = now
            except OSError:
                self.count("subscriber_errors")
            with self.lock:
                self.last_event.pop(key, None)
            rst_close(s) if rnd.random() < 0.5 else s.close()

    def slowloris(self):
        socks = []
        while self.running():
            if self.paused.is_set():
                for s in socks:
                    s.close()
                socks = []
                self.hold_while_paused()
                continue
            while len(socks) < SLOWLORIS:
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                    s.setblocking(False)
                    s.send(b"GET /eth/v1/node/version HTTP/1.1\r\nHost: x\r\n")
                    socks.append(s)
                    self.count("slowloris_opened")
                except OSError:
                    self.count("slowloris_refused")
                    break
            alive = []
            for s in socks:
                try:
                    s.send(b"X")
                    alive.append(s)
                except OSError:
                    self.count("slowloris_cut")
                    s.close()
            socks = alive
            time.sleep(1.0)
        for s in socks:
            s.close()

    def never_reader(self):
        """Asks for large blocks, pipelined (more than the kernel's socket buffers hold), and
        never reads: beaconmux must cut it after sendTimeout and release what it held. Judged
        by beaconmux's own socket table (is the connection still among its descriptors?), not
        by reading: a close leaves megabytes queued in the kernel before the FIN."""
        held = []
        while self.running():
            if self.paused.is_set():
                for s, _, _ in held:
                    s.close()
                held = []
                self.hold_while_paused()
                continue
            now = time.monotonic()
            still = []
            for s, port, opened in held:
                if now - opened > SEND_TIMEOUT_S * 4:
                    if any(c["remote_port"] == port for c in self.tcp_sockets()):
                        self.fail("a never-reading client was not cut within %ds" % (
                            SEND_TIMEOUT_S * 4))
                    else:
                        self.count("never_reading_cut")
                    s.close()
                else:
                    still.append((s, port, opened))
            held = still
            if len(held) < NEVER_READING:
                try:
                    # a small receive window from the handshake on: the answers stay queued in
                    # beaconmux instead of in this socket's buffer
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.settimeout(2)
                    s.connect(("127.0.0.1", self.port))
                    s.sendall(b"GET /eth/v2/beacon/blocks/head HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
                    held.append((s, s.getsockname()[1], now))
                    self.count("never_reading_opened")
                except OSError:
                    self.count("never_reading_refused")
            time.sleep(2.0)
        for s, _, _ in held:
            s.close()

    def resetter(self, seed):
        """Clients that reset their connection: before the answer, after a byte of it."""
        rnd = random.Random(seed)
        reqs = [b"GET /eth/v2/beacon/blocks/head HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /eth/v1/events?topics=head HTTP/1.1\r\nHost: x\r\n\r\n",
                b"POST /eth/v1/beacon/pool/sync_committees HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 400\r\n\r\n[{\"slot\"",
                b"GET /eth/v1/beacon/states/head/finality_checkpoints HTTP/1.1\r\nHost: x\r\n\r\n"]
        while self.running():
            self.hold_while_paused()
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                s.sendall(rnd.choice(reqs))
                if rnd.random() < 0.5:
                    try:
                        s.recv(1)
                    except OSError:
                        pass
                rst_close(s)
                self.count("resets")
            except OSError:
                self.count("reset_connect_errors")
            time.sleep(rnd.uniform(0.1, 0.4))

    def chaos(self):
        """Every CHAOS seconds the next node is killed, hung or made slow for a while."""
        actions = [{"down": True}, {"hang": True}, {"slow": 1500}]
        clear = {"down": {"down": False}, "hang": {"hang": False}, "slow": {"slow": 0}}
        k = 0
        next_t = time.monotonic() + self.a.chaos
        while self.running():
            if time.monotonic() < next_t or self.paused.is_set():
                time.sleep(0.2)
                continue
            node = k % len(self.node_urls)
            act = actions[(k // len(self.node_urls) + k) % len(actions)]
            name = next(iter(act))
            start = time.monotonic() - self.t0
            self.sim_json("PUT", "/sim/v1/nodes/%d" % node, act)
            print("%7.1fs chaos: node %d %s" % (start, node, name), flush=True)
            end_at = time.monotonic() + self.a.chaos_hold
            while self.running() and time.monotonic() < end_at:
                time.sleep(0.2)
            self.sim_json("PUT", "/sim/v1/nodes/%d" % node, clear[name])
            with self.lock:
                self.chaos_log.append((node, name, start, time.monotonic() - self.t0))
            k += 1
            next_t = time.monotonic() + self.a.chaos

    # ---- the run -------------------------------------------------------------------------------

    def run(self):
        self.start()
        self.fork = self.truth()["fork"]
        self.bound = None
        threads = [threading.Thread(target=self.sampler), threading.Thread(target=self.duty_clock),
                   threading.Thread(target=self.collect_submissions),
                   threading.Thread(target=self.slowloris), threading.Thread(target=self.never_reader),
                   threading.Thread(target=self.chaos)]
        threads += [threading.Thread(target=self.reader, args=(i,)) for i in range(READERS)]
        threads += [threading.Thread(target=self.subscriber, args=(i,)) for i in range(SUBSCRIBERS)]
        threads += [threading.Thread(target=self.resetter, args=(i,)) for i in range(2)]
        for t in threads:
            t.daemon = True
            t.start()
        warm_end = time.monotonic() + self.a.warmup
        while self.running() and time.monotonic() < warm_end:
            time.sleep(0.2)
        self.start_quiet = self.quiet_point("after warm-up") if self.running() else None
        if self.start_quiet:
            q = self.start_quiet
            # what the hostile clients, readers, subscribers and the nodes may hold at once
            clients = SLOWLORIS + NEVER_READING + READERS + SUBSCRIBERS + 2 + \
                ATTESTERS_PER_SLOT + WRITES_PER_SLOT + 4
            self.bound = {"rss_kb": q["rss_kb"], "fd_bound": q["fds"] + clients + 3 * 64}
            self.paused.clear()
        end = time.monotonic() + self.a.seconds - self.a.warmup
        while self.running() and time.monotonic() < end:
            time.sleep(0.2)
        self.end_quiet = self.quiet_point("at the end") if self.running() else None
        # the last broadcasts' write windows close before delivery is judged
        time.sleep(WRITE_TIMEOUT_S + 3)
        self.stop.set()
        for t in threads:
            t.join(30)
        self.judge_deliveries()
        self.judge_end()
        rc = self.mux.stop(20.0)
        if rc != 0:
            self.fail("beaconmux exited with %s on SIGTERM; last lines:\n%s" % (
                rc, "\n".join(self.mux.tail())))
        if self.mux.sanitizer_lines:
            self.fail("sanitizer reports:\n%s" % "\n".join(self.mux.sanitizer_lines))
        self.sim.stop()
        return self.report()

    def judge_deliveries(self):
        """Every broadcast must be recorded by every node that was up for the whole of its
        write window (sent, answered, and writeTimeout after)."""
        missing = 0
        expected = 0
        for index, (sent, answered) in sorted(self.writes.items()):
            if answered is None:
                continue  # already failed as lost
            for node in range(len(self.node_urls)):
                window = (sent - 1, answered + WRITE_TIMEOUT_S + 1)
                hit = any(n == node and s < window[1] and e > window[0]
                          for (n, _, s, e) in self.chaos_log)
                if hit:
                    continue
                expected += 1
                if index not in self.recorded[node]:
                    missing += 1
                    if missing <= 10:
                        self.fail("broadcast %d (sent at %.1fs) never reached node %d" % (
                            index, sent, node))
        self.counts["deliveries_expected"] = expected
        self.counts["deliveries_missing"] = missing

    def judge_end(self):
        if not (self.start_quiet and self.end_quiet):
            return
        a, b = self.start_quiet, self.end_quiet
        # the upstream keep-alive connections are judged by their own bound, not here
        fa, fb = a["fds"] - a["upstream_conns"], b["fds"] - b["upstream_conns"]
        if fb > fa * (1 + END_TOLERANCE) + 1:
            self.fail("descriptors not back: %d after warm-up, %d at the end (upstream "
                      "connections excluded)" % (fa, fb))
        if b["upstream_conns"] > 3 * 64:
            self.fail("%d upstream connections at the end" % b["upstream_conns"])
        if not self.a.sanitizer and b["rss_kb"] > a["rss_kb"] * (1 + END_TOLERANCE):
            self.fail("RSS not back: %d kB after warm-up, %d kB at the end" % (
                a["rss_kb"], b["rss_kb"]))
        reads = self.counts["reads"]
        if reads and self.counts["read_errors"] > reads * READ_ERROR_SHARE:
            self.fail("%d of %d reads failed" % (self.counts["read_errors"], reads))
        if self.max_event_gap > SUBSCRIBER_GAP_SLOTS * SLOT_MS / 1000.0:
            self.fail("an event subscriber waited %.1fs for an event" % self.max_event_gap)

    def report(self):
        lat = {}
        for kind, v in self.lat.items():
            xs = [x for (_, x) in v]
            lat[kind] = {"n": len(xs), "p50_ms": round(percentile(xs, 0.5) * 1000, 1),
                         "p99_ms": round(percentile(xs, 0.99) * 1000, 1),
                         "max_ms": round(max(xs) * 1000, 1)}
        peak = {k: max((s[k] for s in self.samples), default=None)
                for k in ("rss_kb", "fds", "upstream_conns", "client_conns")}
        summary = {"seconds": self.a.seconds, "build": self.a.bin_dir, "counts": dict(self.counts),
                   "latency": lat, "peak": peak, "after_warmup": self.start_quiet,
                   "at_end": self.end_quiet, "chaos": self.chaos_log,
                   "max_event_gap_s": round(self.max_event_gap, 1), "failures": self.failures}
        print("\n=== timeline (every %ds)" % self.a.sample)
        print("%8s %9s %5s %9s %8s %10s %10s" % ("t_s", "rss_kb", "fds", "upstream", "clients",
                                                  "duty_p99", "read_p99"))
        step = max(1, len(self.samples) // 60)
        for s in self.samples[::step]:
            print("%8.1f %9d %5d %9d %8d %10s %10s" % (s["t"], s["rss_kb"], s["fds"],
                                                      s["upstream_conns"], s["client_conns"],
                                                      s["duty_p99_ms"], s["read_p99_ms"]))
        print("\n=== summary")
        print(json.dumps({k: v for k, v in summary.items() if k != "chaos"}, indent=1))
        if self.a.json:
            with open(self.a.json, "w") as f:
                json.dump(dict(summary, samples=self.samples), f, indent=1)
        ok = not self.failures
        print("\nsoak %s" % ("PASSED" if ok else "FAILED"))
        return 0 if ok else 1


def rst_close(s):
    """Closes with a reset instead of a FIN (SO_LINGER 0)."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=int(os.environ.get("SOAK_SECONDS", 1800)))
    p.add_argument("--bin-dir", default=os.path.join(SOURCE_DIR, "build", "release"))
    p.add_argument("--warmup", type=int, default=None, help="default: a tenth, 20 to 120 s")
    p.add_argument("--chaos", type=int, default=None, help="seconds between node faults")
    p.add_argument("--chaos-hold", type=int, default=20, help="seconds a fault lasts")
    p.add_argument("--sample", type=int, default=5)
    p.add_argument("--json", default=None, help="write the summary and samples here")
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    if a.warmup is None:
        a.warmup = max(20, min(120, a.seconds // 10))
    if a.chaos is None:
        a.chaos = max(15, min(150, a.seconds // 12))
    a.chaos_hold = min(a.chaos_hold, a.chaos)
    if a.workdir is None:
        import tempfile
        a.workdir = tempfile.mkdtemp(prefix="bm-soak-")
    cache = os.path.join(os.path.dirname(os.path.abspath(a.bin_dir)), os.path.basename(a.bin_dir),
                         "CMakeCache.txt")
    a.sanitizer = os.path.exists(cache) and "BM_SANITIZE:BOOL=ON" in open(cache).read()
    soak = Soak(a)
    try:
        rc = soak.run()
    finally:
        for child in ("mux", "sim"):
            c = getattr(soak, child, None)
            if c is not None and c.p.poll() is None:
                c.p.kill()
    sys.exit(rc)


if __name__ == "__main__":
    main()
