# SPDX-License-Identifier: MIT
"""Shared helpers for beaconmux's integration tests (python3 standard library only).

Starts the real binaries (beaconmux, beaconsim) on ephemeral loopback ports, a scripted
upstream that is *not* built on our HTTP module (http.server), and raw-socket clients for
the cases urllib cannot express (pipelining, slowloris, 100-continue). Waiting is always
for a condition with a bound, never a bare sleep.
"""
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import unittest

BIN_DIR = os.environ.get("BM_BIN_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "debug")
SOURCE_DIR = os.environ.get("BM_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")

# The nodes' timing most tests run with: a dead or hung node is given up within a second, and
# one that is away is looked for every 200 ms, so that what a test does to a node shows
# within its slot. A test appends its own sections.
QUICK_NODES = """
timeouts:
  connect: 300ms
  read: 700ms
discovery:
  retryInterval: 200ms
"""

ROOT_A = "0x" + "4b" * 32
ROOT_B = "0x" + "9c" * 32


def run_tool(args, **kw):
    """Runs a command to its end; its output as text (for build and packaging tools)."""
    return subprocess.run(args, capture_output=True, text=True, **kw)


def project_version():
    """The version in CMakeLists.txt's project()."""
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        return re.search(r"project\(beaconmux VERSION (\S+)", f.read()).group(1)


def wait_for(cond, timeout=10.0, interval=0.01, what="condition"):
    """Polls cond() until it returns a truthy value or the bound passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def now_ms():
    """Wall-clock milliseconds, the time beaconsim's truth gives its slot points in."""
    return int(time.time() * 1000)


def sleep_until(t_ms):
    """Waits for a wall-clock point of a slot taken from the truth (to act at that point,
    never as synchronisation)."""
    d = (t_ms - now_ms()) / 1000.0
    if d > 0:
        time.sleep(d)


def port_of(url):
    """The port of a node's URL (http://127.0.0.1:PORT[/...])."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


def upstreams_yaml(nodes):
    """The upstreams section naming the nodes n0, n1, ... in order."""
    return "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                    for i, u in enumerate(nodes))


class Proc:
    """A child process whose stderr is collected in a background thread."""

    def __init__(self, args, env=None):
        self.args = args
        e = dict(os.environ)
        e.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        if env:
            e.update(env)
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
        self.out_lines = []
        self.err_lines = []
        self._lock = threading.Lock()
        self._t_out = threading.Thread(target=self._pump, args=(self.p.stdout, self.out_lines), daemon=True)
        self._t_err = threading.Thread(target=self._pump, args=(self.p.stderr, self.err_lines), daemon=True)
        self._t_out.start()
        self._t_err.start()

    def _pump(self, stream, lines):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                self._keep(lines, line)
            if os.environ.get("BM_TEST_VERBOSE"):
                sys.stderr.write("[%s] %s\n" % (os.path.basename(self.args[0]), line))

    def _keep(self, lines, line):
        """Called with the lock held for every line read; a test keeps them all (the soak,
        whose run is long, keeps a tail)."""
        lines.append(line)

    def stdout(self):
        with self._lock:
            return list(self.out_lines)

    def stderr(self):
        with self._lock:
            return list(self.err_lines)

    def wait_line(self, pattern, timeout=10.0, stream="stderr"):
        rx = re.compile(pattern)

        def find():
            for line in (self.stderr() if stream == "stderr" else self.stdout()):
                m = rx.search(line)
                if m:
                    return m
            if self.p.poll() is not None:
                raise AssertionError("%s exited (%s) before printing /%s/:\n%s" % (
                    self.args[0], self.p.returncode, pattern, "\n".join(self.stderr()[-40:])))
            return None
        return wait_for(find, timeout, what="/%s/ from %s" % (pattern, os.path.basename(self.args[0])))

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def stop(self, timeout=15.0):
        """SIGTERM, then wait; returns the exit code. Kills after the bound."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._t_out.join(2)
        self._t_err.join(2)
        for stream in (self.p.stdout, self.p.stderr):
            try:
                stream.close()
            except OSError:
                pass
        return self.p.returncode


class Beaconmux(Proc):
    """beaconmux on an ephemeral port; `self.port` is parsed from its log."""

    def __init__(self, upstreams=(), config_text=None, args=(), env=None, tmpdir=None):
        cmd = [os.path.join(BIN_DIR, "beaconmux"), "--listen", "127.0.0.1:0", "--log-level", "debug"]
        self.config_path = None
        if config_text is not None:
            import tempfile
            fd, self.config_path = tempfile.mkstemp(suffix=".yaml", dir=tmpdir)
            with os.fdopen(fd, "w") as f:
                f.write(config_text)
            cmd += ["--config", self.config_path]
        for u in upstreams:
            cmd += ["--upstream", u]
        cmd += list(args)
        super().__init__(cmd, env)
        m = self.wait_line(r"listening on http://127\.0\.0\.1:(\d+)")
        self.port = int(m.group(1))

    def stop(self, timeout=15.0):
        rc = super().stop(timeout)
        if self.config_path:
            try:
                os.unlink(self.config_path)
            except OSError:
                pass
        return rc

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        return http_request(self.port, method, path, body, headers, timeout)

    def status(self):
        st, _, body = self.request("GET", "/beaconmux/v1/status")
        assert st == 200, st
        return json.loads(body)

    def node_states(self):
        return {u["id"]: u["state"] for u in self.status()["upstreams"]}

    def upstreams(self):
        """The status page's upstream entries by id."""
        return {u["id"]: u for u in self.status()["upstreams"]}

    def wait_cluster_ready(self, timeout, what, serving_only=False):
        """Waits for a cluster head and every node `ready` (with serving_only, every node but
        the shadows, which need not be)."""
        def ready():
            st = self.status()
            return st.get("cluster_head") and all(
                u["state"] == "ready" for u in st["upstreams"]
                if not (serving_only and u.get("shadow")))
        return wait_for(ready, timeout, what=what)

    def explain(self, lines=40):
        """The nodes' states and beaconmux's last log lines: the message of an assertion
        about which node served, so a failure says why that node was (not) chosen."""
        ups = {u["id"]: (u.get("state"), u.get("state_reason") or u.get("reason"))
               for u in self.status()["upstreams"]}
        return "nodes: %s; beaconmux's last lines:\n%s" % (ups, "\n".join(self.stderr()[-lines:]))

    def wait_state(self, node_id, state, timeout=10.0):
        try:
            return wait_for(lambda: self.node_states().get(node_id) == state, timeout,
                            what="%s to be %s" % (node_id, state))
        except AssertionError as e:
            ups = {u["id"]: u for u in self.status()["upstreams"]}
            u = ups.get(node_id, {})
            raise AssertionError("%s; it is %s (%s); beaconmux's last lines:\n%s" % (
                e, u.get("state"), u.get("state_reason") or u.get("reason"),
                "\n".join(self.stderr()[-40:]))) from None


def http_request(port, method, path, body=None, headers=None, timeout=10.0):
    """One request on a fresh connection; returns (status, headers dict lowercased, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def raw_exchange(port, data, timeout=5.0, read_until_close=True, expect_bytes=None):
    """Sends raw bytes and returns everything read until close, timeout, or expect_bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if expect_bytes is not None and len(out) >= expect_bytes:
                break
            if not read_until_close and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


def count_responses(raw):
    return len(re.findall(rb"HTTP/1\.[01] \d{3} ", raw))


# ---- a scripted upstream that is not built on our HTTP module ---------------------------

def beacon_spec(seconds_per_slot=12, slots_per_epoch=32, extra=None):
    spec = {
        "CONFIG_NAME": "testnet",
        "PRESET_BASE": "mainnet",
        "SECONDS_PER_SLOT": str(seconds_per_slot),
        "SLOTS_PER_EPOCH": str(slots_per_epoch),
        "GENESIS_FORK_VERSION": "0x10000000",
        "ALTAIR_FORK_VERSION": "0x20000000",
        "ALTAIR_FORK_EPOCH": "0",
        "ELECTRA_FORK_VERSION": "0x60000000",
        "ELECTRA_FORK_EPOCH": "0",
        "FULU_FORK_VERSION": "0x70000000",
        "FULU_FORK_EPOCH": "0",
        "GLOAS_FORK_VERSION": "0x80000000",
        "GLOAS_FORK_EPOCH": "18446744073709551615",
        "DEPOSIT_CHAIN_ID": "17000",
        "DOMAIN_BEACON_ATTESTER": "0x01000000",
    }
    if extra:
        spec.update(extra)
    return spec


DISCOVERY_PATHS = ("/eth/v1/node/version", "/eth/v1/beacon/genesis", "/eth/v1/config/spec",
                   "/eth/v1/config/fork_schedule", "/eth/v1/config/deposit_contract",
                   "/eth/v1/node/syncing")
HEADERS_PATH = "/eth/v1/beacon/headers/"  # a node's head (and its ancestry): it has one


def att_data_root(d):
    """hash_tree_root(AttestationData) from its JSON form: the root a validator client names
    when it asks for the aggregate of that data."""
    def u64(v):
        return int(v).to_bytes(8, "little") + b"\0" * 24

    def h(a, b):
        return hashlib.sha256(a + b).digest()

    def root(x):
        return bytes.fromhex(x[2:])

    def cp(c):
        return h(u64(c["epoch"]), root(c["root"]))

    leaves = [u64(d["slot"]), u64(d["index"]), root(d["beacon_block_root"]), cp(d["source"]),
              cp(d["target"])] + [b"\0" * 32] * 3
    l1 = [h(leaves[2 * i], leaves[2 * i + 1]) for i in range(4)]
    return "0x" + h(h(l1[0], l1[1]), h(l1[2], l1[3])).hex()


def fake_root(slot):
    """The root of the double's block at `slot` (every double has the same chain)."""
    return "0x%064x" % (slot + 1)


# The doubles' genesis, an hour ago, fixed once per test process: every double of a test
# is on one network unless the test says otherwise. (Computed per double, two doubles made
# on either side of a second boundary, as happens on a loaded machine, had genesis times a
# second apart, and beaconmux rightly took one of them for a node on another network.)
FAKE_GENESIS_TIME = int(time.time()) - 3600


class FakeBeacon:
    """A beacon node double on http.server (threaded, HTTP/1.1 keep-alive).

    `routes` maps (method, path) to a callable(handler) -> (status, headers, body) or to a
    tuple; `mode` switches the node: "ok", "hang" (accept, never answer), "error" (500),
    "midbody" (headers then half a body, then close). Modes spare the discovery paths and
    the block headers (so the node stays "ready": beaconmux judges a node by its head once
    the chain runs) unless suffixed "-all". Every request is recorded. The double's chain
    has a block at every slot (`fake_root`), its head at the current slot.
    """

    def __init__(self, genesis_root=ROOT_A, version="Lighthouse/v7.0.0/x86_64-linux",
                 seconds_per_slot=2, slots_per_epoch=32, genesis_time=None, tls=None):
        self.genesis_root = genesis_root
        self.version = version
        self.genesis_time = genesis_time if genesis_time is not None else FAKE_GENESIS_TIME
        self.spec = beacon_spec(seconds_per_slot, slots_per_epoch)
        self.mode = "ok"
        self.requests = []
        self.routes = {}
        self.lock = threading.Lock()
        self.release = threading.Event()
        self._server = None
        self.conns = []
        self.port = None
        self.tls = tls  # (certfile, keyfile) to serve HTTPS
        self.start()

    def json_body(self, obj):
        return 200, {"Content-Type": "application/json"}, json.dumps(obj).encode()

    def default_route(self, method, path):
        if path == "/eth/v1/node/version":
            return self.json_body({"data": {"version": self.version}})
        if path == "/eth/v1/beacon/genesis":
            return self.json_body({"data": {"genesis_time": str(self.genesis_time),
                                            "genesis_validators_root": self.genesis_root,
                                            "genesis_fork_version": "0x10000000"}})
        if path == "/eth/v1/config/spec":
            return self.json_body({"data": self.spec})
        if path == "/eth/v1/config/fork_schedule":
            return self.json_body({"data": [{"previous_version": "0x10000000",
                                             "current_version": "0x10000000", "epoch": "0"}]})
        if path.startswith(HEADERS_PATH):
            return self.header(path[len(HEADERS_PATH):])
        if path == "/eth/v1/config/deposit_contract":
            return self.json_body({"data": {"chain_id": "17000",
                                            "address": "0x4242424242424242424242424242424242424242"}})
        return 404, {"Content-Type": "application/json"}, b'{"code":404,"message":"not found"}'

    def current_slot(self):
        spp = int(self.spec["SECONDS_PER_SLOT"])
        return max(0, (int(time.time()) - self.genesis_time) // spp)

    def header(self, block_id):
        """GET /eth/v1/beacon/headers/{head | 0x root}: the double's block."""
        slot = self.current_slot()
        if block_id != "head":
            try:
                slot = int(block_id, 16) - 1
            except ValueError:
                slot = -1
            if slot < 0 or slot > self.current_slot():
                return 404, {"Content-Type": "application/json"}, b'{"code":404,"message":"not found"}'
        root = fake_root(slot)
        return self.json_body({"execution_optimistic": False, "finalized": False, "data": {
            "root": root, "canonical": True, "header": {"message": {
                "slot": str(slot), "proposer_index": "1", "parent_root": fake_root(max(0, slot - 1)),
                "state_root": root, "body_root": root}, "signature": "0x" + "00" * 96}}})

    def start(self, port=0):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # An answer leaves in two writes (head, then body). With Nagle's algorithm the
            # body waits for the ACK of the head, which the reader delays (40 ms and up to
            # 200 ms under load) on a kept-alive connection: the double would answer beaconmux's
            # head probe later than its probe time although it is not slow at all.
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                rec = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                       "raw_headers": [(k.lower(), v) for k, v in self.headers.items()],
                       "body": body, "time": time.monotonic()}
                with outer.lock:
                    outer.requests.append(rec)
                mode = outer.mode
                route = outer.routes.get((self.command, path)) or outer.routes.get(("*", path))
                # modes hit everything but discovery and the head, unless they end in "-all"
                if (path in DISCOVERY_PATHS or path.startswith(HEADERS_PATH)) \
                        and not mode.endswith("-all"):
                    mode = "ok"
                mode = mode[:-4] if mode.endswith("-all") else mode
                if mode == "hang":
                    outer.release.wait(60)
                    self.close_connection = True
                    return
                if mode == "error":
                    self._send(500, {"Content-Type": "application/json"},
                               b'{"code":500,"message":"internal error"}')
                    return
                if route is not None:
                    res = route(self, rec) if callable(route) else route
                else:
                    res = outer.default_route(self.command, path)
                if res is None:
                    return  # the route wrote the answer itself
                status, headers, data = res
                if mode == "midbody":
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data) + 1000))
                    self.end_headers()
                    self.wfile.write(data[: max(1, len(data) // 2)])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(status, headers, data)

            def _send(self, status, headers, data):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def process_request(self, request, client_address):
                with outer.lock:
                    outer.conns.append(request)
                super().process_request(request, client_address)

        self._server = Server(("127.0.0.1", port), Handler)
        if self.tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            ctx.set_alpn_protocols(["http/1.1"])
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def stop(self):
        """Closes the listening socket and every open connection: the node is down."""
        if self._server:
            self.release.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            with self.lock:
                conns, self.conns = self.conns, []
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def restart(self):
        self.release = threading.Event()
        self.start(self.port)

    def paths(self):
        with self.lock:
            return [r["path"] for r in self.requests]

    def find(self, method, path):
        with self.lock:
            return [r for r in self.requests if r["method"] == method and r["path"] == path]


def self_signed_cert(directory):
    """Writes a throwaway certificate for 127.0.0.1 (and its key) into directory, for the
    https:// nodes of the TLS tests; returns (cert path, key path). Needs the openssl CLI."""
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def stop_all(mux, sim):
    """Stops beaconmux and then beaconsim (each stop closes the child's pipes); returns
    beaconmux's exit code, which the test asserts after its own clean-up."""
    rc = mux.stop()
    sim.stop()
    return rc


def free_port():
    """A loopback port free now (bound then closed), for a program told its port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ensure_packages(*programs):
    """The programs of scripts/install-deps.sh's observe profile (prometheus, promtool,
    chromium, chromedriver), installed through it when missing. False when they cannot be had
    (no network, no root): the caller skips."""
    if all(shutil.which(p) for p in programs):
        return True
    r = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "install-deps.sh"), "observe"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stderr.write(r.stdout.decode("utf-8", "replace")[-2000:])
    return all(shutil.which(p) for p in programs)


def closed_port():
    """A loopback port with nothing listening (bound then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class HangServer:
    """Accepts connections and never answers (a hung node)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except (socket.timeout, OSError):
                continue

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self._stop = True
        self._t.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def main():
    unittest.main(verbosity=2)


class Beaconsim(Proc):
    """beaconsim with N nodes on free ports; parses the node and control URLs it prints."""

    def __init__(self, nodes=3, slot_ms=1000, slots_per_epoch=8, args=(), node_specs=None):
        cmd = [os.path.join(BIN_DIR, "beaconsim"), "--nodes", str(nodes), "--base-port", "0",
               "--slot-ms", str(slot_ms), "--slots-per-epoch", str(slots_per_epoch),
               "--log-level", "warn"]
        for i, spec in (node_specs or {}).items():
            cmd += ["--node", "%d:%s" % (i, spec)]
        cmd += list(args)
        super().__init__(cmd)
        self.slot_ms = slot_ms
        m = self.wait_line(r"^control (http://\S+)", stream="stdout")
        self.control = m.group(1)
        self.nodes = []
        for line in self.stdout():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "node":
                self.nodes.append(parts[2])
        assert len(self.nodes) == nodes, self.stdout()

    def _json(self, method, path, body=None):
        port = int(self.control.rsplit(":", 1)[1])
        data = json.dumps(body).encode() if body is not None else None
        st, _, raw = http_request(port, method, path, data,
                                  {"Content-Type": "application/json"} if data else None)
        assert 200 <= st < 300, (method, path, st, raw)
        return json.loads(raw) if raw else None

    def truth(self, slot=None):
        return self._json("GET", "/sim/v1/truth" + ("" if slot is None else "?slot=%d" % slot))

    def put_node(self, i, behaviour):
        return self._json("PUT", "/sim/v1/nodes/%d" % i, behaviour)

    def node(self, i):
        return self._json("GET", "/sim/v1/nodes/%d" % i)

    def submissions(self, i, since=None):
        return self._json("GET", "/sim/v1/nodes/%d/submissions%s" % (i, "" if since is None else "?since=%d" % since))

    def requests(self, i):
        return self._json("GET", "/sim/v1/nodes/%d/requests" % i)

    def clear_requests(self, i):
        self._json("DELETE", "/sim/v1/nodes/%d/requests" % i)

    def scenario(self, body):
        return self._json("POST", "/sim/v1/scenario", body)

    def wait_slot(self, slot, timeout=None):
        """Waits (bounded) until the current slot is at least `slot`."""
        wait_for(lambda: self.truth()["current_slot"] >= slot,
                 timeout or (self.slot_ms / 1000.0) * (slot - self.truth()["current_slot"] + 2),
                 what="slot %d" % slot)
