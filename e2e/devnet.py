#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A local Lodestar devnet on loopback, for end-to-end tests of beaconmux.

Three (or N) Lodestar v1.5.1 beacon nodes share one interop genesis (validators with the
interop keys 0..V-1, genesis a few seconds in the future), peer with each other over
libp2p on 127.0.0.1, and run with Lodestar's built-in mock execution engine. One Lodestar
validator client holds every validator key; its beacon node URL is a parameter: beaconmux,
one node, or a comma-separated list (the client's own fallback mode).

As a library (python3 stdlib only):

    from devnet import Devnet
    with Devnet(seconds_per_slot=6) as dn:       # stop() on exit, exception or SIGINT
        dn.start(vc_url=None)                     # nodes only
        ... start beaconmux with dn.node_urls ...
        dn.start_vc("http://127.0.0.1:5555")
        dn.wait_for_slot(20)
        dn.kill_node(1); dn.restart_node(1)       # kill -9, restart with its database
        dn.pause_node(2); dn.resume_node(2)       # SIGSTOP / SIGCONT

As a CLI:  python3 e2e/devnet.py --help

Every process logs to <run_dir>/<name>.log (appended across restarts); the run directory
also holds each node's data directory and devnet.json (ports, URLs, genesis time).
Nothing here sleeps a fixed time to synchronise: every wait polls a condition with a bound.
"""

import argparse
import atexit
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHE = os.path.join(HERE, ".cache")
SLOTS_PER_EPOCH = 8  # Lodestar's dev network uses the minimal preset


def lodestar_entry():
    """Path of the installed Lodestar CLI entry point (see e2e/install.sh)."""
    cache = os.environ.get("BM_E2E_CACHE") or DEFAULT_CACHE
    return os.path.join(cache, "lodestar-1.5.1", "node_modules", "@chainsafe", "lodestar",
                        "lib", "index.js")


class DevnetError(RuntimeError):
    pass


def wait_until(cond, timeout, what, interval=0.1):
    """Poll cond() until it returns a true value; return that value. Raise after timeout s."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - the condition may fail until ready
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise DevnetError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(interval)


def http_get(url, timeout=2.0, accept="application/json"):
    """GET url; return (status, body bytes). HTTP errors are returned, not raised."""
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_json(url, timeout=2.0):
    status, body = http_get(url, timeout)
    if status != 200:
        raise DevnetError(f"GET {url}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


_given_ports = set()  # never hand out the same port twice in one process


def _ephemeral_range():
    """The kernel's range for ports bound to 0 (other programs' listeners and clients)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port):
    """True when `port` can be bound on 127.0.0.1 for both TCP and UDP right now."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_port():
    """A port free for both TCP and UDP on 127.0.0.1 (libp2p uses TCP, discv5 UDP).

    Chosen below the kernel's ephemeral range: a Lodestar node binds its ports seconds after
    they are chosen, and a port from the ephemeral range could meanwhile be handed by the
    kernel to any other program binding port 0 (seen on a shared machine: another test's
    server answered on a node's REST port). Ports under the range are only ever taken by
    programs that name them.
    """
    lo, _ = _ephemeral_range()
    if lo - 10000 >= 1000:
        for _ in range(200):
            port = random.randrange(10000, lo)
            if port not in _given_ports and _bindable(port):
                _given_ports.add(port)
                return port
    for _ in range(100):  # no room under the range: let the kernel pick
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        t.close()
        if port not in _given_ports and _bindable(port):
            _given_ports.add(port)
            return port
    raise DevnetError("no free port")


_PR_SET_PDEATHSIG = 1


def _child_setup():
    """In the child: own process group, and SIGKILL when the parent dies (even by -9).

    The kernel sends PR_SET_PDEATHSIG when the *thread* that forked the child ends, not
    the process: a node (re)started from a helper thread dies with that thread, so such a
    thread must outlive the devnet (schedule.Chaos waits until it is released).
    """
    os.setsid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


class Proc:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name, argv, cwd, log_path, env=None):
        self.name, self.argv, self.cwd, self.log_path, self.env = name, argv, cwd, log_path, env
        self.popen = None
        self.paused = False
        self.starts = 0

    def start(self):
        if self.running():
            raise DevnetError(f"{self.name} is already running")
        os.makedirs(self.cwd, exist_ok=True)
        log = open(self.log_path, "ab", buffering=0)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n=== devnet: start {self.name} at {stamp} ({time.time():.3f})\n"
                  f"=== {' '.join(self.argv)}\n".encode())
        try:
            self.popen = subprocess.Popen(self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                          preexec_fn=_child_setup)
        finally:
            log.close()
        self.paused = False
        self.starts += 1

    def running(self):
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def signal(self, sig):
        if not self.running():
            raise DevnetError(f"{self.name} is not running")
        os.killpg(self.popen.pid, sig)

    def pause(self):
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.signal(signal.SIGCONT)
        self.paused = False

    def kill9(self):
        """kill -9 the whole process group and reap it."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait()
        self.paused = False

    def stop(self, timeout=15.0, signalled=False):
        """SIGTERM (resuming a paused process first), then SIGKILL after timeout s.

        Lodestar takes a second SIGTERM as "force exit": signalled=True sends none.
        """
        if self.popen is None or self.popen.poll() is not None:
            return
        if not signalled:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                if self.paused:
                    os.killpg(self.popen.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
        # Lodestar may leave nothing behind, but make sure the group is gone.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.paused = False

    def cpu_seconds(self):
        """User+system CPU time of the process group's leader and its threads so far."""
        if not self.running():
            return None
        with open(f"/proc/{self.popen.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick


_live = set()  # devnets not yet stopped, for the atexit / signal clean-up
_live_lock = threading.Lock()


def _cleanup_all():
    with _live_lock:
        nets = list(_live)
    for dn in nets:
        try:
            dn.stop()
        except Exception:  # noqa: BLE001
            pass


atexit.register(_cleanup_all)


class Node:
    def __init__(self, index, rest_port, p2p_port, home):
        self.index = index
        self.name = f"node{index}"
        self.rest_port = rest_port
        self.p2p_port = p2p_port
        self.home = home
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def enr_path(self):
        return os.path.join(self.home, "data", "enr")


class Devnet:
    """A Lodestar devnet: N beacon nodes and one validator client, all on 127.0.0.1.

    nodes: number of beacon nodes (default 3).
    validators: interop validators in genesis, all held by the one validator client.
    seconds_per_slot: SECONDS_PER_SLOT (2 or 6 are the tested values).
    genesis_delay: genesis is this many seconds after start() is called; it must cover the
        time the nodes need to start and peer (6-12 s on 2 cores), else the first slots
        pass before the validator client is up.
    run_dir: where logs and data go (default: a new directory under /tmp).
    forks: chain config overrides, e.g. {"ALTAIR_FORK_EPOCH": 0}; the default is Altair
        at genesis, Bellatrix and later never (Bellatrix at genesis would be post-merge, and
        Lodestar's mock engine does not know the interop genesis payload hash).
    vc_log_level: the validator client's log level (default: log_level); "debug" logs
        every request, signed attestation and head event with its time (e2e/evidence.py).
    subscribe_all_subnets: nodes subscribe to every attestation subnet (a small devnet
        needs this: all nodes then see every attestation, whichever node the client used).
    """

    def __init__(self, nodes=3, validators=16, seconds_per_slot=6, genesis_delay=20,
                 run_dir=None, forks=None, subscribe_all_subnets=True, log_level="info",
                 node_extra_args=(), vc_extra_args=(), lodestar=None, node_binary="node",
                 vc_log_level=None):
        self.n_nodes = nodes
        self.validators = validators
        self.seconds_per_slot = seconds_per_slot
        self.genesis_delay = genesis_delay
        self.forks = {"ALTAIR_FORK_EPOCH": 0} if forks is None else dict(forks)
        self.subscribe_all_subnets = subscribe_all_subnets
        self.log_level = log_level
        self.vc_log_level = vc_log_level or log_level
        self.node_extra_args = list(node_extra_args)
        self.vc_extra_args = list(vc_extra_args)
        self.lodestar = lodestar or lodestar_entry()
        self.node_binary = node_binary
        self.run_dir = os.path.abspath(run_dir) if run_dir else tempfile.mkdtemp(
            prefix="bm-devnet-")
        self.genesis_time = None
        self.nodes = []
        self.vc = None
        self.vc_url = None
        self.extra = {}  # name -> Proc, see add_process()
        self.started_at = None
        self.timings = {}
        self._stopped = False
        self._prev_sigint = None

    # --- context manager and clean-up ---------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def install_signal_handlers(self):
        """SIGINT/SIGTERM stop the devnet, then raise KeyboardInterrupt (for CLI use)."""
        def handler(signum, frame):
            self.stop()
            raise KeyboardInterrupt(f"signal {signum}")
        self._prev_sigint = signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    # --- arguments -----------------------------------------------------------------------
    def _params_args(self):
        args = ["--params.SECONDS_PER_SLOT", str(self.seconds_per_slot)]
        for k, v in sorted(self.forks.items()):
            args += [f"--params.{k}", str(v)]
        return args

    def _env(self):
        # Lodestar's log lines carry ANSI colours whatever the environment says (winston's
        # colorize forces them); strip with sed 's/\x1b\[[0-9;]*m//g' to read. Its time
        # stamps are local time without a zone: UTC, as beaconmux's, so logs compare.
        env = dict(os.environ)
        env["TZ"] = "UTC"
        return env

    def _node_argv(self, node, bootnodes):
        argv = [self.node_binary, "--no-warnings", self.lodestar, "dev",
                "--dataDir", os.path.join(node.home, "data"),
                "--genesisValidators", str(self.validators),
                "--genesisTime", str(self.genesis_time),
                "--rest", "--rest.address", "127.0.0.1", "--rest.port", str(node.rest_port),
                "--rest.namespace", "*",
                "--listenAddress", "127.0.0.1", "--port", str(node.p2p_port),
                "--enr.ip", "127.0.0.1", "--enr.tcp", str(node.p2p_port),
                "--enr.udp", str(node.p2p_port),
                "--execution.engineMock", "--eth1=false",
                "--metrics=false",
                "--logLevel", self.log_level, "--logFile", "none"]
        if self.subscribe_all_subnets:
            argv.append("--subscribeAllSubnets")
        if bootnodes:
            argv += ["--bootnodes", ",".join(bootnodes), "--network.connectToDiscv5Bootnodes"]
        return argv + self._params_args() + self.node_extra_args

    def _vc_argv(self, url):
        return [self.node_binary, "--no-warnings", self.lodestar, "validator",
                "--network", "dev",
                "--dataDir", os.path.join(self.run_dir, "vc", "data"),
                "--beaconNodes", url,
                "--interopIndexes", f"0..{self.validators - 1}",
                "--logLevel", self.vc_log_level, "--logFile", "none",
                "--force"] + self._params_args() + self.vc_extra_args

    # --- start ---------------------------------------------------------------------------
    def start(self, vc_url="nodes", late=(), wait_peers=True, timeout=90):
        """Start the nodes (all but the indexes in `late`), then the validator client.

        vc_url: "nodes" = the comma-separated list of all node URLs (the client's fallback
        mode), "node0".."nodeN" = one node, any other string = that URL (e.g. beaconmux),
        None = no validator client yet (start it with start_vc()).
        wait_peers: wait until every started node has a peer (needs 2+ started nodes).
        """
        if self.nodes:
            raise DevnetError("already started")
        if not os.path.exists(self.lodestar):
            raise DevnetError(f"Lodestar not installed at {self.lodestar}: run e2e/install.sh")
        with _live_lock:
            _live.add(self)
        os.makedirs(self.run_dir, exist_ok=True)
        t0 = time.monotonic()
        self.started_at = time.time()
        self.genesis_time = int(time.time()) + int(self.genesis_delay)
        for i in range(self.n_nodes):
            home = os.path.join(self.run_dir, f"node{i}")
            self.nodes.append(Node(i, free_port(), free_port(), home))
        late = set(late)
        first = [n for n in self.nodes if n.index not in late]
        # The first node is the discv5 bootnode of the others; it writes its ENR at start.
        if first:
            self._start_node(first[0], wait_api=False)
            wait_until(lambda: self._read_enr(first[0]), 30, f"{first[0].name}'s ENR")
            for n in first[1:]:
                self._start_node(n, wait_api=False)
            for n in first:
                self._wait_api(n, timeout)
        self.timings["nodes_api_up_s"] = round(time.monotonic() - t0, 2)
        self._write_info()
        for n in first:
            self.connect_peers(n.index)
        if wait_peers and len(first) > 1:
            for n in first:
                wait_until(lambda n=n: self.peer_count(n.index) >= 1, timeout,
                           f"{n.name} to have a peer")
            self.timings["nodes_peered_s"] = round(time.monotonic() - t0, 2)
        if vc_url is not None:
            self.start_vc(vc_url)
        self.timings["start_s"] = round(time.monotonic() - t0, 2)
        self._write_info()
        return self

    def identity(self, i):
        return self.api(i, "/eth/v1/node/identity")

    def connect_peers(self, i):
        """Dial from node i every other running node, through Lodestar's admin API.

        discv5 alone (bootnodes) took 30-90 s to peer the nodes on loopback; a direct dial
        takes well under a second. The bootnodes stay, for rediscovery after restarts.
        """
        me = self.nodes[i]
        for other in self.nodes:
            if other is me or not (other.proc and other.proc.running()) or other.proc.paused:
                continue
            try:
                peer_id = self.identity(other.index)["peer_id"]
            except Exception:  # noqa: BLE001 - the other node may be going down
                continue
            q = urllib.parse.urlencode({"peerId": peer_id,
                                        "multiaddr": f"/ip4/127.0.0.1/tcp/{other.p2p_port}"})
            req = urllib.request.Request(f"{me.url}/eth/v1/lodestar/connect_peer?{q}",
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
            except urllib.error.HTTPError as e:
                raise DevnetError(f"{me.name}: connect_peer {other.name}: HTTP {e.code}: "
                                  f"{e.read()[:200]!r}") from e

    def _read_enr(self, node):
        try:
            with open(node.enr_path) as f:
                enr = f.read().strip()
        except FileNotFoundError:
            return None
        return enr if enr.startswith("enr:") else None

    def _start_node(self, node, wait_api=True, timeout=60):
        # Bootnodes: the current ENRs of the other running nodes (a restarted Lodestar
        # node gets a new peer id and ENR, so they are read afresh at every start).
        boots = []
        for other in self.nodes:
            if other is not node and other.proc and other.proc.running():
                enr = self._read_enr(other)
                if enr:
                    boots.append(enr)
        if node.proc is None:
            node.proc = Proc(node.name, [], node.home, os.path.join(self.run_dir,
                                                                     f"{node.name}.log"),
                             env=self._env())
        if os.path.exists(node.enr_path):
            os.unlink(node.enr_path)  # so _read_enr() sees the new one
        node.proc.argv = self._node_argv(node, boots)
        node.proc.start()
        if wait_api:
            self._wait_api(node, timeout)
            self.connect_peers(node.index)

    def _wait_api(self, node, timeout):
        def up():
            if not node.proc.running():
                raise DevnetError(f"{node.name} exited with {node.proc.popen.returncode}; "
                                  f"see {node.proc.log_path}")
            status, body = http_get(node.url + "/eth/v1/node/version", timeout=1)
            if status != 200:
                return False
            version = json.loads(body)["data"]["version"]
            if not version.startswith("Lodestar/"):
                raise DevnetError(f"{node.name}'s port {node.rest_port} is answered by "
                                  f"another program ({version!r})")
            return True
        try:
            wait_until(up, timeout, f"{node.name}'s API at {node.url}")
        except DevnetError as e:
            if not node.proc.running():
                raise DevnetError(f"{node.name} exited with {node.proc.popen.returncode}; "
                                  f"see {node.proc.log_path}") from e
            raise

    def start_vc(self, url="nodes"):
        """Start (or restart) the validator client against url (see start())."""
        if url == "nodes":
            url = ",".join(n.url for n in self.nodes)
        elif isinstance(url, str) and url.startswith("node") and url[4:].isdigit():
            url = self.nodes[int(url[4:])].url
        if self.vc and self.vc.running():
            self.vc.stop()
        self.vc_url = url
        self.vc = Proc("vc", self._vc_argv(url), os.path.join(self.run_dir, "vc"),
                       os.path.join(self.run_dir, "vc.log"), env=self._env())
        self.vc.start()
        self._write_info()
        return self.vc

    def stop_vc(self):
        if self.vc:
            self.vc.stop()

    def add_process(self, name, argv, cwd=None, env=None):
        """Start another process (beaconmux, a load generator) that stop() ends first.

        It runs in its own process group, logs to <run_dir>/<name>.log and dies with us.
        """
        if name in self.extra:
            raise DevnetError(f"a process named {name} exists")
        with _live_lock:
            _live.add(self)
        self._stopped = False
        p = Proc(name, list(argv), cwd or os.path.join(self.run_dir, name),
                 os.path.join(self.run_dir, f"{name}.log"), env=env)
        os.makedirs(self.run_dir, exist_ok=True)
        p.start()
        self.extra[name] = p
        return p

    # --- node control --------------------------------------------------------------------
    def node(self, i):
        return self.nodes[i]

    @property
    def node_urls(self):
        return [n.url for n in self.nodes]

    def kill_node(self, i):
        """kill -9 node i (its database stays for restart_node)."""
        self.nodes[i].proc.kill9()

    def stop_node(self, i, timeout=15):
        self.nodes[i].proc.stop(timeout)

    def restart_node(self, i, wait_api=True, timeout=60):
        """(Re)start node i with its database: after kill_node/stop_node, or a late node."""
        n = self.nodes[i]
        if n.proc and n.proc.running():
            n.proc.stop()
        self._start_node(n, wait_api=wait_api, timeout=timeout)

    start_node = restart_node  # start a node left out with start(late=[i])

    def pause_node(self, i):
        """SIGSTOP node i: its sockets stay open but it answers nothing."""
        self.nodes[i].proc.pause()

    def resume_node(self, i):
        self.nodes[i].proc.resume()

    def node_running(self, i):
        n = self.nodes[i]
        return bool(n.proc and n.proc.running())

    # --- queries -------------------------------------------------------------------------
    def api(self, i, path, timeout=2.0):
        return http_json(self.nodes[i].url + path, timeout)["data"]

    def peer_count(self, i):
        return int(self.api(i, "/eth/v1/node/peer_count")["connected"])

    def head(self, i):
        """(slot, root) of node i's head block."""
        h = self.api(i, "/eth/v1/beacon/headers/head")
        return int(h["header"]["message"]["slot"]), h["root"]

    def syncing(self, i):
        return self.api(i, "/eth/v1/node/syncing")

    def finality(self, i):
        return self.api(i, "/eth/v1/beacon/states/head/finality_checkpoints")

    def slot_start(self, slot):
        return self.genesis_time + slot * self.seconds_per_slot

    def current_slot(self):
        return int((time.time() - self.genesis_time) // self.seconds_per_slot)

    def wait_for_slot(self, slot, extra=0.0):
        """Block until wall clock reaches the start of `slot` (+ extra seconds).

        Waiting for the clock is the condition itself here; it is bounded by the slot.
        """
        target = self.slot_start(slot) + extra
        while True:
            left = target - time.time()
            if left <= 0:
                return
            time.sleep(min(left, 0.5))

    def wait_for_head(self, i, slot, timeout=None):
        """Wait until node i's head is at or past `slot`."""
        if timeout is None:
            timeout = max(0, self.slot_start(slot) - time.time()) + 4 * self.seconds_per_slot
        return wait_until(lambda: self.head(i)[0] >= slot, timeout,
                          f"node{i}'s head to reach slot {slot}", interval=0.25)

    def cpu_seconds(self):
        """CPU seconds used so far by each running process, by name."""
        out = {}
        for n in self.nodes:
            if n.proc and n.proc.running():
                out[n.name] = n.proc.cpu_seconds()
        if self.vc and self.vc.running():
            out["vc"] = self.vc.cpu_seconds()
        for name, p in self.extra.items():
            if p.running():
                out[name] = p.cpu_seconds()
        return out

    def info(self):
        return {
            "run_dir": self.run_dir,
            "genesis_time": self.genesis_time,
            "seconds_per_slot": self.seconds_per_slot,
            "slots_per_epoch": SLOTS_PER_EPOCH,
            "validators": self.validators,
            "forks": self.forks,
            "nodes": [{"name": n.name, "url": n.url, "p2p_port": n.p2p_port,
                       "pid": n.proc.pid if n.proc and n.proc.running() else None,
                       "log": os.path.join(self.run_dir, f"{n.name}.log")}
                      for n in self.nodes],
            "vc": {"beacon_nodes": self.vc_url,
                   "pid": self.vc.pid if self.vc and self.vc.running() else None,
                   "log": os.path.join(self.run_dir, "vc.log")},
            "timings": self.timings,
        }

    def _write_info(self):
        tmp = os.path.join(self.run_dir, "devnet.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.info(), f, indent=2)
        os.replace(tmp, os.path.join(self.run_dir, "devnet.json"))

    # --- stop ----------------------------------------------------------------------------
    def stop(self):
        """Stop the validator client and every node (SIGTERM, then SIGKILL). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        procs = (list(self.extra.values()) + ([self.vc] if self.vc else [])
                 + [n.proc for n in self.nodes if n.proc])
        # Signal all first so they shut down in parallel, then wait for each.
        for p in procs:
            if p.running():
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    if p.paused:
                        os.killpg(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for p in procs:
            p.stop(timeout=15, signalled=True)
        with _live_lock:
            _live.discard(self)


# --- CLI -------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Run a local Lodestar devnet (3 beacon nodes + 1 validator client).")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--validators", type=int, default=16)
    ap.add_argument("--seconds-per-slot", type=int, default=6)
    ap.add_argument("--genesis-delay", type=int, default=20,
                    help="seconds from now to genesis (default 20)")
    ap.add_argument("--run-dir", help="logs and data (default: new dir under /tmp)")
    ap.add_argument("--vc-url", default="nodes",
                    help='validator client\'s beacon node(s): "nodes" (all, fallback mode; '
                         'default), "node0", a URL such as beaconmux\'s, or "none"')
    ap.add_argument("--late", type=int, action="append", default=[],
                    help="index of a node to start only after --late-slot (repeatable)")
    ap.add_argument("--late-slot", type=int, default=8)
    ap.add_argument("--slots", type=int, default=0,
                    help="run until this slot, print the score, stop (0: until Ctrl-C)")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--fork", action="append", default=[], metavar="NAME=EPOCH",
                    help="e.g. ALTAIR_FORK_EPOCH=0 (default: Altair at genesis)")
    args = ap.parse_args(argv)

    forks = None
    if args.fork:
        forks = dict(f.split("=", 1) for f in args.fork)
    dn = Devnet(nodes=args.nodes, validators=args.validators,
                seconds_per_slot=args.seconds_per_slot, genesis_delay=args.genesis_delay,
                run_dir=args.run_dir, forks=forks, log_level=args.log_level)
    dn.install_signal_handlers()
    try:
        vc = None if args.vc_url == "none" else args.vc_url
        dn.start(vc_url=vc, late=args.late)
        print(f"devnet: run dir {dn.run_dir}", flush=True)
        for n in dn.nodes:
            print(f"devnet: {n.name} {n.url} p2p {n.p2p_port}", flush=True)
        print(f"devnet: validator client -> {dn.vc_url}", flush=True)
        print(f"devnet: genesis at {dn.genesis_time} (in {dn.genesis_time - time.time():.1f} s),"
              f" {dn.seconds_per_slot} s slots; started in {dn.timings['start_s']} s",
              flush=True)
        late_done = not args.late
        slot = 0
        while args.slots == 0 or slot < args.slots:
            slot = max(dn.current_slot() + 1, 0)
            dn.wait_for_slot(slot)
            if not late_done and slot >= args.late_slot:
                for i in args.late:
                    dn.start_node(i)
                    print(f"devnet: started late {dn.nodes[i].name}", flush=True)
                late_done = True
            heads = []
            for n in dn.nodes:
                try:
                    heads.append(str(dn.head(n.index)[0]))
                except Exception:  # noqa: BLE001
                    heads.append("-")
            print(f"devnet: slot {slot} heads {' '.join(heads)}", flush=True)
        if args.slots:
            # let the last slot's block and attestations land before scoring
            dn.wait_for_slot(args.slots, extra=dn.seconds_per_slot * 0.9)
            import score
            rep = score.score(dn.nodes[0].url, 1, args.slots - 1,
                              seconds_per_slot=dn.seconds_per_slot)
            print(score.format_report(rep), flush=True)
    except KeyboardInterrupt:
        print("devnet: interrupted, stopping", file=sys.stderr)
        return 130
    finally:
        dn.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
