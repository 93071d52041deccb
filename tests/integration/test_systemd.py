# SPDX-License-Identifier: MIT
"""beaconmux under a service manager, with this test playing systemd's part.

- sd_notify: a NOTIFY_SOCKET datagram listener (a path, and an abstract '@' name) gets
  READY=1 once a node is discovered (not before: an unreachable node keeps it back; with
  --no-wait at once), WATCHDOG=1 at half of WATCHDOG_USEC, and STOPPING=1 on SIGTERM.
- socket activation: the test holds a listening socket and passes it as fd 3 with
  LISTEN_FDS/LISTEN_PID, as systemd does with beaconmux.socket. A restart (SIGTERM to the
  old process, then the new one on the same socket) and an overlapping upgrade (the new
  one started before the old one is told to drain) are measured while a client keeps
  reading proposer duties: every answer must be 200 and equal to the node's own, and the
  time from the restart command to the first answer of the new process is reported.
- server.reusePort: a second process binds the same port while the first still runs;
  without it the bind is refused.
"""
import fcntl
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (BIN_DIR, QUICK_NODES, Beaconmux, Beaconsim, Proc, closed_port,  # noqa: E402
                     http_request, main, wait_for)
from test_listen_tls import client_ctx, make_pki  # noqa: E402


def listening_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s

CONFIG = QUICK_NODES


class Notify:
    """A NOTIFY_SOCKET listener: collects each datagram beaconmux sends."""

    def __init__(self, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "bm-notify-%d-%d" % (os.getpid(), id(self))
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.dir = tempfile.mkdtemp(prefix="bm-notify-")
            self.address = os.path.join(self.dir, "notify")
            self.sock.bind(self.address)
        self.sock.settimeout(0.05)
        self.messages = []
        self.times = []
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            self.times.append(time.monotonic())
            self.messages.append(data.decode())

    def has(self, prefix):
        return [m for m in self.messages if any(line.startswith(prefix) for line in m.split("\n"))]

    def first_time(self, prefix):
        for m, t in zip(list(self.messages), list(self.times)):
            if any(line.startswith(prefix) for line in m.split("\n")):
                return t
        return None

    def close(self):
        self._stop = True
        self._t.join(2)
        self.sock.close()
        if not self.address.startswith("@"):
            os.unlink(self.address)
            os.rmdir(self.dir)


def mux_args(cfg_path, extra=()):
    return [os.path.join(BIN_DIR, "beaconmux"), "--config", cfg_path, "--log-level", "info"] + \
        list(extra)


def activated(socks, args, env):
    """Starts args with `socks` (one socket or a list) as fds 3, 4, ... and LISTEN_PID set
    to the process's own pid, as systemd does: the shell (bash: dash takes no fd above 9)
    learns its pid ($$) and execs beaconmux, which keeps it."""
    socks = socks if isinstance(socks, list) else [socks]
    # copies above the fds 3, 4, ... they are moved to, so that no move overwrites a
    # socket another move still needs
    fds = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100) for s in socks]
    moves = " ".join("%d<&%d" % (3 + i, fd) for i, fd in enumerate(fds))
    cmd = ["/bin/bash", "-c", 'LISTEN_PID=$$ LISTEN_FDS=%d LISTEN_FDNAMES=beaconmux exec "$@" %s'
           % (len(fds), moves), "sh"] + args
    try:
        return _PassFd(cmd, env, fds)
    finally:
        for fd in fds:
            os.close(fd)


class _PassFd(Proc):
    """Proc that keeps descriptors open across exec (subprocess closes the others)."""

    def __init__(self, args, env, fds):
        self.args = args
        e = dict(os.environ)
        e.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        e.update(env)
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                                  pass_fds=tuple(fds))
        self.out_lines, self.err_lines = [], []
        self._lock = threading.Lock()
        self._t_out = threading.Thread(target=self._pump, args=(self.p.stdout, self.out_lines),
                                       daemon=True)
        self._t_err = threading.Thread(target=self._pump, args=(self.p.stderr, self.err_lines),
                                       daemon=True)
        self._t_out.start()
        self._t_err.start()


class DutyReader:
    """Keeps reading proposer duties through beaconmux on fresh connections, comparing
    each answer with the node's own; counts failures and when answers came."""

    def __init__(self, port, sim):
        self.port = port
        self.sim = sim
        self.ok_times = []
        self.failures = []
        self._stop = False
        node_port = int(sim.nodes[0].rsplit(":", 1)[1])
        self.node_port = node_port
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def truth(self, epoch):
        st, _, body = http_request(self.node_port, "GET",
                                   "/eth/v1/validator/duties/proposer/%d" % epoch)
        return json.loads(body)["data"] if st == 200 else None

    def _run(self):
        while not self._stop:
            epoch = self.sim.truth()["current_epoch"]
            try:
                st, _, body = http_request(self.port, "GET",
                                           "/eth/v1/validator/duties/proposer/%d" % epoch,
                                           timeout=5)
            except OSError as e:
                self.failures.append(repr(e))
                continue
            if st != 200:
                self.failures.append("status %d: %s" % (st, body[:200]))
                continue
            got = json.loads(body)["data"]
            want = self.truth(epoch)
            if got != want:
                self.failures.append("epoch %d: %s != %s" % (epoch, got[:1], (want or [])[:1]))
                continue
            self.ok_times.append(time.monotonic())

    def first_ok_after(self, t):
        return next((x for x in list(self.ok_times) if x > t), None)

    def stop(self):
        self._stop = True
        self._t.join(10)


class Systemd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = Beaconsim(nodes=2, slot_ms=1000, slots_per_epoch=8)
        cls.tmp = tempfile.mkdtemp(prefix="bm-systemd-")
        cls.cfg = os.path.join(cls.tmp, "beaconmux.yaml")
        ups = "upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                       for i, u in enumerate(cls.sim.nodes))
        with open(cls.cfg, "w") as f:
            f.write(CONFIG + ups)

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        import shutil
        shutil.rmtree(cls.tmp, True)

    def config_text(self):
        with open(self.cfg) as f:
            return f.read()

    def test_notify_ready_watchdog_stopping(self):
        for abstract in (False, True):
            n = Notify(abstract)
            mux = Beaconmux(config_text=self.config_text(),
                            env={"NOTIFY_SOCKET": n.address, "WATCHDOG_USEC": "200000"})
            try:
                wait_for(lambda: n.has("READY=1"), 10, what="READY=1")
                # READY=1 follows discovery: some node is reachable and on the right network
                # (its head may not be judged yet: no-head counts)
                self.assertTrue(any(s not in ("unknown", "unreachable", "wrong-network")
                                    for s in mux.node_states().values()), mux.node_states())
                wait_for(lambda: len(n.has("WATCHDOG=1")) >= 3, 5, what="three watchdog pings")
                self.assertEqual(mux.stop(), 0)
                self.assertTrue(n.has("STOPPING=1"), n.messages)
                self.assertEqual(len(n.has("READY=1")), 1)
            finally:
                mux.stop()
                n.close()

    def test_ready_waits_for_a_node_unless_no_wait(self):
        dead = "upstreams:\n  - id: gone\n    url: http://127.0.0.1:%d\n" % closed_port()
        for no_wait in (False, True):
            n = Notify()
            mux = Beaconmux(config_text=CONFIG + dead, args=["--no-wait"] if no_wait else [],
                            env={"NOTIFY_SOCKET": n.address, "WATCHDOG_USEC": "100000"})
            try:
                if no_wait:
                    wait_for(lambda: n.has("READY=1"), 5, what="READY=1 with --no-wait")
                else:
                    # messages do flow (the watchdog), but no node: no READY=1
                    wait_for(lambda: len(n.has("WATCHDOG=1")) >= 5, 5, what="watchdog pings")
                    mux.wait_state("gone", "unreachable", timeout=5)
                    self.assertEqual(n.has("READY=1"), [])
            finally:
                self.assertEqual(mux.stop(), 0)
                n.close()

    def start_activated(self, sock, notify):
        p = activated(sock, mux_args(self.cfg), {"NOTIFY_SOCKET": notify.address})
        p.wait_line(r"listening on http://127\.0\.0\.1:(\d+) \(socket from systemd\)")
        return p

    def test_restart_and_upgrade_on_an_activated_socket(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        notes = [Notify() for _ in range(3)]
        procs = []
        try:
            old = self.start_activated(sock, notes[0])
            procs.append(old)
            wait_for(lambda: notes[0].has("READY=1"), 10, what="READY=1")
            reader = DutyReader(port, self.sim)
            wait_for(lambda: len(reader.ok_times) >= 3, 10, what="duty answers")

            # systemctl restart: the old process drains, then the new one starts on the
            # same socket; clients wait in its backlog meanwhile
            t0 = time.monotonic()
            old.signal(signal.SIGTERM)
            self.assertEqual(old.p.wait(15), 0)
            new = self.start_activated(sock, notes[1])
            procs.append(new)
            wait_for(lambda: notes[1].has("READY=1"), 10, what="READY=1 after the restart")
            first = wait_for(lambda: reader.first_ok_after(t0 + 0.0) and
                             reader.first_ok_after(notes[1].first_time("READY=1") or 1e18),
                             10, what="a duty answer after the restart")
            restart_s = notes[1].first_time("READY=1") - t0

            # an upgrade beside the running process: the new one is ready before the old
            # one is told to drain
            t1 = time.monotonic()
            newer = self.start_activated(sock, notes[2])
            procs.append(newer)
            wait_for(lambda: notes[2].has("READY=1"), 10, what="READY=1 of the upgrade")
            ready_s = notes[2].first_time("READY=1") - t1
            new.signal(signal.SIGTERM)
            self.assertEqual(new.p.wait(15), 0)
            t2 = time.monotonic()
            wait_for(lambda: reader.first_ok_after(t2), 10, what="answers after the drain")
            reader.stop()
            sys.stderr.write("\nrestart: READY=1 %.3f s after SIGTERM, first duty answer "
                             "after it %.3f s; upgrade: READY=1 %.3f s after start; %d duty "
                             "reads, %d failed\n" % (restart_s, first - t0, ready_s,
                                                     len(reader.ok_times), len(reader.failures)))
            self.assertEqual(reader.failures, [])
            self.assertLess(first - t0, 1.0)
        finally:
            for p in procs:
                p.stop()
            for n in notes:
                n.close()
            sock.close()

    def on_port(self, port, reuse):
        """beaconmux on a given port (the harness's Beaconmux always asks for port 0)."""
        path = os.path.join(self.tmp, "port-%d-%s.yaml" % (port, reuse))
        with open(path, "w") as f:
            f.write(self.config_text() + "listen: 127.0.0.1:%d\nserver:\n  reusePort: %s\n"
                    % (port, "true" if reuse else "false"))
        return Proc(mux_args(path))

    def test_reuse_port_lets_a_second_process_bind(self):
        port = closed_port()
        first = self.on_port(port, True)
        procs = [first]
        try:
            first.wait_line(r"listening on http://127\.0\.0\.1:%d" % port)
            second = self.on_port(port, True)
            procs.append(second)
            second.wait_line(r"listening on http://127\.0\.0\.1:%d" % port)
            self.assertEqual(first.stop(), 0)
            st, _, _ = http_request(port, "GET", "/eth/v1/node/version")
            self.assertEqual(st, 200)  # the second one serves alone now
            # without the option the port is refused while another process holds it
            third = self.on_port(port, False)
            procs.append(third)
            self.assertEqual(third.p.wait(10), 1)
            third.stop()
            self.assertTrue(any("cannot listen" in line for line in third.stderr()),
                            third.stderr())
            self.assertEqual(second.stop(), 0)
        finally:
            for p in procs:
                p.stop()

    @unittest.skipUnless(shutil.which("openssl"), "openssl CLI needed to make test certificates")
    def test_each_activated_socket_serves_the_listener_of_its_address(self):
        pki = make_pki(self.tmp)
        tls_sock, api_sock = listening_socket(), listening_socket()
        api_port, tls_port = api_sock.getsockname()[1], tls_sock.getsockname()[1]
        path = os.path.join(self.tmp, "two-sockets.yaml")
        with open(path, "w") as f:
            f.write(self.config_text() + "listen: 127.0.0.1:%d\nserver:\n  tls:\n    listen: "
                    "\"127.0.0.1:%d\"\n    certFile: %s\n    keyFile: %s\n"
                    % (api_port, tls_port, pki["srv.crt"], pki["srv.key"]))
        stray = listening_socket()
        procs = []
        try:
            # the TLS socket comes first (fd 3): the address decides, not the order
            p = activated([tls_sock, api_sock], mux_args(path), {})
            procs.append(p)
            p.wait_line(r"listening on https://127\.0\.0\.1:%d .*\(socket from systemd\)"
                        % tls_port)
            p.wait_line(r"listening on http://127\.0\.0\.1:%d \(socket from systemd\)"
                        % api_port)
            self.assertEqual(http_request(api_port, "GET", "/eth/v1/node/version")[0], 200)
            c = http.client.HTTPSConnection("127.0.0.1", tls_port, context=client_ctx(pki),
                                            timeout=10)
            c.request("GET", "/eth/v1/node/version")
            self.assertEqual(c.getresponse().status, 200)
            c.close()
            self.assertEqual(p.stop(), 0)
            # a socket that matches no configured listener stops the start, named
            q = activated([api_sock, stray, tls_sock], mux_args(path), {})
            procs.append(q)
            self.assertEqual(q.p.wait(10), 1)
            err = q.stderr()
            self.assertTrue(any("socket from systemd on 127.0.0.1:%d (fd 4) matches no listener"
                                % stray.getsockname()[1] in line for line in err), err)
        finally:
            for p in procs:
                p.stop()
            for s in (tls_sock, api_sock, stray):
                s.close()

    def test_failed_start_after_a_listener_opened_exits(self):
        # metrics.listen opens before the API listener; the API's port is taken. The open
        # metrics listener used to keep the loop running: the process hung, never exiting.
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        path = os.path.join(self.tmp, "taken.yaml")
        with open(path, "w") as f:
            f.write(self.config_text() + "listen: 127.0.0.1:%d\nmetrics:\n  listen: "
                    "127.0.0.1:0\n" % held.getsockname()[1])
        n = Notify()
        p = Proc(mux_args(path), env={"NOTIFY_SOCKET": n.address})
        try:
            rc = p.p.wait(10)  # raises TimeoutExpired if it hangs
            self.assertEqual(rc, 1)
            err = p.stderr()
            self.assertTrue(any("metrics on http://127.0.0.1:" in line for line in err), err)
            self.assertTrue(any("start failed" in line and "exiting with status 1" in line
                                for line in err), err)
            wait_for(lambda: n.has("STATUS=start failed"), 5, what="the failure told to systemd")
            self.assertEqual(n.has("READY=1"), [])
        finally:
            p.stop()
            n.close()
            held.close()


if __name__ == "__main__":
    main()
