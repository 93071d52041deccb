#!/bin/bash
# SPDX-License-Identifier: MIT
# Duty benchmark: beaconsim with three nodes whose import lags are seeded random
# per slot (lag + jitter), beaconmux in front. Over BENCH_SLOTS slots (default 200) a
# client acting like a validator client asks for attestation data when a head event for
# the slot arrives or at the attestation due time, whichever first: once through
# beaconmux and once straight to each node. Prints
#   - the share of correct head votes (the slot's canonical root, from /sim/v1/truth)
#     through beaconmux and straight to each node, and how often at least one node had it;
#   - the latency a race adds over the fastest fresh node (p50/p99), sampled every slot
#     late in the slot by asking beaconmux and every node at the same moment: one request
#     on each of four kept-alive connections (as a validator client keeps its connection),
#     sent back to back from one thread and timed as each answer completes, so the figure
#     is beaconmux's and not the measuring client's (threads of one Python process, new
#     connections, added a millisecond or more of their own); with the load average;
#   - race throughput: wrk against attestation_data through beaconmux (coalesced races)
#     and straight to one node, interleaved BENCH_RUNS times: medians, spread, load.
# Environment: BM_BIN (build/release/beaconmux), BM_SIM (build/release/beaconsim),
# BENCH_SLOTS (200), BENCH_SLOT_MS (1000), BENCH_SECONDS (wrk, 10), BENCH_CONNECTIONS (64),
# BENCH_RUNS (3), BENCH_SEED (7), BENCH_VERBOSE (set: list the slots beaconmux missed while
# a node had the block).
set -euo pipefail
cd "$(dirname "$0")/.."

export BM_BIN=${BM_BIN:-build/release/beaconmux}
export BM_SIM=${BM_SIM:-build/release/beaconsim}
export BENCH_SLOTS=${BENCH_SLOTS:-200}
export BENCH_SLOT_MS=${BENCH_SLOT_MS:-1000}
export BENCH_SECONDS=${BENCH_SECONDS:-10}
export BENCH_CONNECTIONS=${BENCH_CONNECTIONS:-64}
export BENCH_SEED=${BENCH_SEED:-7}
export BENCH_RUNS=${BENCH_RUNS:-3}
for b in "$BM_BIN" "$BM_SIM"; do
  if [ ! -x "$b" ]; then echo "bench/duties.sh: $b is missing (make build)" >&2; exit 1; fi
done
command -v wrk >/dev/null || { echo "bench/duties.sh: wrk is missing" >&2; exit 1; }

exec python3 - <<'PY'
import http.client, json, os, re, selectors, signal, socket, subprocess, sys, tempfile, threading, time

BIN, SIM = os.environ["BM_BIN"], os.environ["BM_SIM"]
SLOTS, SLOT_MS = int(os.environ["BENCH_SLOTS"]), int(os.environ["BENCH_SLOT_MS"])
SECONDS, CONNS, SEED = int(os.environ["BENCH_SECONDS"]), int(os.environ["BENCH_CONNECTIONS"]), os.environ["BENCH_SEED"]
RUNS = int(os.environ["BENCH_RUNS"])
# seeded random import delay per node and slot: lag + a seeded share of jitter
SPECS = ["lag=0,jitter=700", "lag=100,jitter=500", "lag=250,jitter=300"]
procs = []


def now_ms():
    return int(time.time() * 1000)


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def cleanup(*_):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(1)))


def get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.perf_counter()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return r.status, body, time.perf_counter() - t0
    finally:
        c.close()


def get_json(port, path):
    st, body, _ = get(port, path)
    return json.loads(body) if st == 200 else None


class Probe:
    """Kept-alive connections to beaconmux and every node: one GET on each at the same moment,
    each answer timed from the send to its last byte (one thread, a selector)."""

    def __init__(self, ports):
        self.socks = []
        for p in ports:
            s = socket.create_connection(("127.0.0.1", p))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append((p, s))

    def ask(self, path):
        sel = selectors.DefaultSelector()
        reqs = [("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (path, p)).encode() for p, _ in self.socks]
        out, bufs = [None] * len(self.socks), [bytearray() for _ in self.socks]
        t0 = time.perf_counter()
        for i, (_, s) in enumerate(self.socks):
            s.sendall(reqs[i])
            sel.register(s, selectors.EVENT_READ, i)
        left = len(self.socks)
        while left:
            events = sel.select(10)
            if not events:
                raise RuntimeError("probe: no answer within 10 s")
            for key, _ in events:
                i = key.data
                data = key.fileobj.recv(65536)
                now = time.perf_counter()
                if not data:
                    raise RuntimeError("probe: connection closed")
                b = bufs[i]
                b += data
                end = b.find(b"\r\n\r\n")
                if end < 0:
                    continue
                head = bytes(b[:end]).decode("latin-1")
                n = 0
                for line in head.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        n = int(v)
                if len(b) >= end + 4 + n:
                    out[i] = (int(head.split()[1]), bytes(b[end + 4:end + 4 + n]), now - t0)
                    sel.unregister(key.fileobj)
                    left -= 1
        sel.close()
        return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


try:
    sim = start([SIM, "--nodes", "3", "--base-port", "0", "--slot-ms", str(SLOT_MS),
                 "--slots-per-epoch", "8", "--seed", SEED, "--log-level", "warn"] +
                sum((["--node", "%d:%s" % (i, s)] for i, s in enumerate(SPECS)), []))
    nodes, control = [], None
    while control is None:
        line = sim.stdout.readline()
        if not line:
            sys.exit("beaconsim exited: " + sim.stderr.read())
        parts = line.split()
        if parts[0] == "node":
            nodes.append(parts[2])
        elif parts[0] == "control":
            control = parts[1]
    ports = [int(u.rsplit(":", 1)[1]) for u in nodes]
    cport = int(control.rsplit(":", 1)[1])
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write("timeouts: {connect: 300ms}\ndiscovery: {retryInterval: 200ms}\nupstreams:\n" +
              "".join("  - {id: n%d, url: \"%s\"}\n" % (i, u) for i, u in enumerate(nodes)))
    cfg.close()
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    mport = s.getsockname()[1]
    s.close()
    mux = start([BIN, "--listen", "127.0.0.1:%d" % mport, "--config", cfg.name, "--log-level", "warn"])
    t_end = time.time() + 15
    while True:
        try:
            st = json.loads(get(mport, "/beaconmux/v1/status", 2)[1])
            if st.get("cluster_head") and all(u["state"] == "ready" for u in st["upstreams"]):
                break
        except (OSError, ValueError):
            pass
        if time.time() > t_end:
            sys.exit("beaconmux did not become ready")
        time.sleep(0.1)
    truth_cache = {}

    def truth(slot=None):
        if slot is None:
            return get_json(cport, "/sim/v1/truth")
        if slot not in truth_cache:
            truth_cache[slot] = get_json(cport, "/sim/v1/truth?slot=%d" % slot)
        return truth_cache[slot]

    class Heads(threading.Thread):
        def __init__(self, port):
            super().__init__(daemon=True)
            self.port, self.seen, self.lock = port, set(), threading.Lock()
            self.start()

        def run(self):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
                c.request("GET", "/eth/v1/events?topics=head")
                r = c.getresponse()
                if r.status != 200:
                    return
                while True:
                    line = r.fp.readline()
                    if not line:
                        return
                    if line.startswith(b"data:"):
                        try:
                            with self.lock:
                                self.seen.add(int(json.loads(line[5:])["slot"]))
                        except (ValueError, KeyError):
                            pass
            except (OSError, http.client.HTTPException):
                return

        def has(self, slot):
            with self.lock:
                return any(s >= slot for s in self.seen)

    class VC(threading.Thread):
        """Asks at min(head event for the slot, attestation due time)."""

        def __init__(self, port, slots):
            super().__init__(daemon=True)
            self.port, self.slots, self.votes, self.lat, self.asked = port, slots, {}, {}, {}
            self.heads = Heads(port)
            self.start()

        def run(self):
            for s in self.slots:
                due = truth(s)["attestation_due_ms"]
                while now_ms() < due and not self.heads.has(s):
                    time.sleep(0.001)
                self.asked[s] = now_ms() - truth(s)["start_ms"]
                st, body, took = get(self.port, "/eth/v1/validator/attestation_data?slot=%d" % s)
                self.votes[s] = json.loads(body)["data"]["beacon_block_root"] if st == 200 else None
                self.lat[s] = took

    first = truth()["current_slot"] + 2
    slots = list(range(first, first + SLOTS))
    for s in slots[:3]:
        truth(s)
    print("duty benchmark: %d slots of %d ms, nodes %s, seed %s" % (SLOTS, SLOT_MS, SPECS, SEED))
    vcs = [VC(mport, slots)] + [VC(p, slots) for p in ports]

    # the race's added latency over the fastest fresh node, sampled late in every slot
    added, mux_lat, loads = [], [], []
    probe = Probe([mport] + ports)
    for s in slots:
        t = truth(s)
        d = t["start_ms"] + int(SLOT_MS * 0.8) - now_ms()
        if d > 0:
            time.sleep(d / 1000.0)
        res = [(r[0], json.loads(r[1])["data"]["beacon_block_root"] if r[0] == 200 else None, r[2])
               for r in probe.ask("/eth/v1/validator/attestation_data?slot=%d" % s)]
        loads.append(os.getloadavg()[0])
        canon = t["block_root_at_slot"]
        fresh = [r[2] for r in res[1:] if r[1] == canon]
        if res[0][1] == canon and fresh:
            added.append(1000 * (res[0][2] - min(fresh)))
            mux_lat.append(1000 * res[0][2])
    for vc in vcs:
        vc.join(SLOT_MS / 1000.0 * 4)

    def correct(vc):
        return sum(1 for s in slots if vc.votes.get(s) == truth(s)["block_root_at_slot"])

    mux_ok = correct(vcs[0])
    any_ok = sum(1 for s in slots if any(vc.votes.get(s) == truth(s)["block_root_at_slot"] for vc in vcs[1:]))
    if os.environ.get("BENCH_VERBOSE"):
        for s in slots:
            canon = truth(s)["block_root_at_slot"]
            ok = [vc.votes.get(s) == canon for vc in vcs]
            if not ok[0] and any(ok[1:]):
                print("  missed slot %d: beaconmux asked at +%d ms; nodes %s asked at %s" % (
                    s, vcs[0].asked.get(s, -1), ok[1:], [vc.asked.get(s) for vc in vcs[1:]]))
    print("correct head votes (asked at the head event or the due time, whichever first):")
    print("  through beaconmux      %4d/%d  %5.1f%%   latency p50 %.1f ms p99 %.1f ms" % (
        mux_ok, SLOTS, 100.0 * mux_ok / SLOTS,
        1000 * pct(list(vcs[0].lat.values()), 50), 1000 * pct(list(vcs[0].lat.values()), 99)))
    for i, vc in enumerate(vcs[1:]):
        ok = correct(vc)
        print("  straight to node %d     %4d/%d  %5.1f%%   (%s)" % (i, ok, SLOTS, 100.0 * ok / SLOTS, SPECS[i]))
    print("  at least one node      %4d/%d  %5.1f%%   (the ceiling: some node had the block when asked)" % (
        any_ok, SLOTS, 100.0 * any_ok / SLOTS))
    print("race latency over the fastest fresh node (%d samples at 80%% of the slot, kept-alive "
          "connections, load average %.1f-%.1f):" % (len(added), min(loads), max(loads)))
    print("  added p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; beaconmux p50 %.2f ms, p99 %.2f ms" % (
        pct(added, 50), pct(added, 90), pct(added, 99), max(added) if added else float("nan"),
        pct(mux_lat, 50), pct(mux_lat, 99)))

    # race throughput: many clients asking for the same slot share races (coalescing)
    def counts():
        return sum(get_json(cport, "/sim/v1/nodes/%d/requests" % i)["data"].get("produceAttestationData", 0)
                   for i in range(3))

    def wrk(port, slot):
        out = subprocess.run(["wrk", "-t1", "-c%d" % CONNS, "-d%ds" % SECONDS, "--latency",
                              "http://127.0.0.1:%d/eth/v1/validator/attestation_data?slot=%d" % (port, slot)],
                             capture_output=True, text=True).stdout
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        total = int(re.search(r"(\d+) requests in", out).group(1))
        lat = dict(re.findall(r"\s+(50|99)%\s+([\d.]+\w+)", out))
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        return rps, total, lat, int(non2xx.group(1)) if non2xx else 0

    def cpu_us(pid):
        # user and system time of a process so far, in microseconds (fields 14 and 15 of stat)
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return 1e6 * int(fields[11]) / tick, 1e6 * int(fields[12]) / tick

    print("race throughput (wrk, %d connections, %d s, attestation_data of one slot; %d runs, "
          "interleaved):" % (CONNS, SECONDS, RUNS))
    ratios, mrps, drpss, tl = [], [], [], []
    for run in range(RUNS):
        slot = truth()["current_slot"] + 1
        before = counts()
        load0 = os.getloadavg()[0]
        mux0, sim0 = cpu_us(mux.pid), cpu_us(sim.pid)
        rps, total, lat, bad = wrk(mport, slot)
        mux1, sim1 = cpu_us(mux.pid), cpu_us(sim.pid)
        races = counts() - before
        dsim0 = cpu_us(sim.pid)
        drps, dtotal, dlat, dbad = wrk(ports[0], slot)
        dsim1 = cpu_us(sim.pid)
        load1 = os.getloadavg()[0]
        ratios.append(rps / drps)
        mrps.append(rps)
        drpss.append(drps)
        tl += [load0, load1]
        print("  run %d: through beaconmux %8.0f requests/s (p50 %s, p99 %s, non-2xx %d, %.0f answers per "
              "upstream request); straight to node 0 %8.0f (p50 %s, p99 %s, non-2xx %d); "
              "beaconmux/direct %.2f; load %.1f -> %.1f" % (
                  run + 1, rps, lat.get("50"), lat.get("99"), bad, total / max(1, races), drps,
                  dlat.get("50"), dlat.get("99"), dbad, rps / drps, load0, load1))
        # where the time of an answer through beaconmux goes (the machine's two cores run wrk,
        # beaconmux and the sim): beaconmux's own user and system time, and the sim's
        print("         CPU per answer through beaconmux: beaconmux %.2f us user + %.2f us system, "
              "the sim %.2f us; straight to node 0: the sim %.2f us" % (
                  (mux1[0] - mux0[0]) / total, (mux1[1] - mux0[1]) / total,
                  (sim1[0] + sim1[1] - sim0[0] - sim0[1]) / total,
                  (dsim1[0] + dsim1[1] - dsim0[0] - dsim0[1]) / max(1, dtotal)))
    print("  median: through beaconmux %.0f requests/s, straight to node 0 %.0f; beaconmux/direct %.2f "
          "(runs %.2f-%.2f; load average %.1f-%.1f)" % (
              pct(mrps, 50), pct(drpss, 50), pct(ratios, 50), min(ratios), max(ratios), min(tl), max(tl)))
finally:
    cleanup()
    try:
        os.unlink(cfg.name)
    except (NameError, OSError):
        pass
PY
